//! The job slots of one workspace: a semaphore whose size follows `execution.max_parallel_jobs`,
//! re-read at every acquisition so that an edit to the config counts from the next job on.

use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub struct JobSlots {
    semaphore: Arc<Semaphore>,
    /// Permits the semaphore currently owns (available plus held).
    size: Mutex<usize>,
}

impl JobSlots {
    pub fn new(size: usize) -> JobSlots {
        let size = size.max(1);
        JobSlots { semaphore: Arc::new(Semaphore::new(size)), size: Mutex::new(size) }
    }

    /// Wait for a slot after resizing to `limit`. Growing wakes waiters at once; shrinking
    /// retires free permits now and held ones as later acquisitions find them returned.
    pub async fn acquire(&self, limit: usize) -> OwnedSemaphorePermit {
        self.resize(limit.max(1));
        self.semaphore.clone().acquire_owned().await.expect("the slot semaphore is never closed")
    }

    /// The current number of slots.
    pub fn size(&self) -> usize {
        *crate::sync::lock(&self.size)
    }

    fn resize(&self, limit: usize) {
        let mut size = crate::sync::lock(&self.size);
        if limit > *size {
            self.semaphore.add_permits(limit - *size);
            *size = limit;
        } else if limit < *size {
            *size -= self.semaphore.forget_permits(*size - limit);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::JobSlots;

    #[tokio::test]
    async fn the_size_follows_the_limit_given_at_each_acquisition() {
        let slots = JobSlots::new(1);
        let first = slots.acquire(1).await;
        assert_eq!(slots.semaphore.available_permits(), 0);
        // Raised to 3: two more run beside the first.
        let second = slots.acquire(3).await;
        let third = slots.acquire(3).await;
        assert_eq!(slots.semaphore.available_permits(), 0);
        // Lowered to 1: released permits are retired until only one slot is left.
        drop((second, third));
        slots.resize(1);
        assert_eq!((slots.semaphore.available_permits(), *slots.size.lock().unwrap()), (0, 1));
        drop(first);
        assert_eq!(slots.semaphore.available_permits(), 1);
        let _only = slots.acquire(1).await;
        assert!(slots.semaphore.clone().try_acquire_owned().is_err());
    }
}
