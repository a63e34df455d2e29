//! The job slots of one workspace: a semaphore whose size follows `execution.max_parallel_jobs`,
//! re-read as each job is queued and when its turn comes, so that an edit to the config counts
//! from the next job on; handed out in the order the jobs were queued.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

pub struct JobSlots {
    semaphore: Arc<Semaphore>,
    /// Permits the semaphore currently owns (available plus held).
    size: Mutex<usize>,
    line: Arc<Line>,
}

/// The jobs waiting for a slot, by the number each was given when it was queued. Only the
/// first waits on the semaphore: a job's task may first run after a later job's (the runtime
/// runs the task spawned last first), so the semaphore's own fairness cannot keep the order.
#[derive(Default)]
struct Line {
    waiting: Mutex<(u64, BTreeSet<u64>)>,
    moved: Notify,
}

/// A job's place in the line for a slot, taken when the job is queued; leaving the line
/// (taking a slot, or dropped with a job that never ran) lets the next one on.
pub struct Place {
    line: Arc<Line>,
    number: u64,
}

impl Drop for Place {
    fn drop(&mut self) {
        crate::sync::lock(&self.line.waiting).1.remove(&self.number);
        self.line.moved.notify_waiters();
    }
}

impl JobSlots {
    pub fn new(size: usize) -> JobSlots {
        let size = size.max(1);
        JobSlots { semaphore: Arc::new(Semaphore::new(size)), size: Mutex::new(size), line: Arc::default() }
    }

    /// Take the next place in the line (synchronously, as the job is queued), after resizing
    /// to `limit`: a limit raised while the line waits lets it on from the next job queued.
    pub fn line_up(&self, limit: usize) -> Place {
        self.resize(limit.max(1));
        let mut waiting = crate::sync::lock(&self.line.waiting);
        let number = waiting.0;
        waiting.0 += 1;
        waiting.1.insert(number);
        Place { line: self.line.clone(), number }
    }

    /// Wait until `place` is first in line, then for a slot after resizing to `limit`.
    /// Growing wakes the waiter at once; shrinking retires free permits now and held ones as
    /// later acquisitions find them returned.
    pub async fn acquire(&self, place: Place, limit: impl Fn() -> usize) -> OwnedSemaphorePermit {
        loop {
            let moved = self.line.moved.notified();
            tokio::pin!(moved);
            moved.as_mut().enable();
            if crate::sync::lock(&self.line.waiting).1.first() == Some(&place.number) {
                break;
            }
            moved.await;
        }
        self.resize(limit().max(1));
        let permit = self.semaphore.clone().acquire_owned().await.expect("the slot semaphore is never closed");
        drop(place);
        permit
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
        let first = slots.acquire(slots.line_up(1), || 1).await;
        assert_eq!(slots.semaphore.available_permits(), 0);
        // Raised to 3: two more run beside the first.
        let second = slots.acquire(slots.line_up(3), || 3).await;
        let third = slots.acquire(slots.line_up(3), || 3).await;
        assert_eq!(slots.semaphore.available_permits(), 0);
        // Lowered to 1: released permits are retired until only one slot is left.
        drop((second, third));
        slots.resize(1);
        assert_eq!((slots.semaphore.available_permits(), *slots.size.lock().unwrap()), (0, 1));
        drop(first);
        assert_eq!(slots.semaphore.available_permits(), 1);
        let _only = slots.acquire(slots.line_up(1), || 1).await;
        assert!(slots.semaphore.clone().try_acquire_owned().is_err());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn slots_go_in_the_order_the_jobs_were_queued_whichever_task_runs_first() {
        let slots = std::sync::Arc::new(JobSlots::new(1));
        let held = slots.acquire(slots.line_up(1), || 1).await;
        let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (places, mut tasks) = ((0..6).map(|_| slots.line_up(1)).collect::<Vec<_>>(), Vec::new());
        // The last queued is started first, and the second is dropped with its job unrun.
        for (n, place) in places.into_iter().enumerate().rev() {
            if n == 1 {
                continue;
            }
            let (slots, order) = (slots.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let _permit = slots.acquire(place, || 1).await;
                order.lock().unwrap().push(n);
                tokio::task::yield_now().await;
            }));
        }
        // Whether a task has got to its wait or not when the slot comes free, its place holds.
        drop(held);
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 2, 3, 4, 5]);
    }

    #[tokio::test]
    async fn a_limit_raised_while_the_line_waits_lets_it_on_from_the_next_job_queued() {
        let slots = std::sync::Arc::new(JobSlots::new(1));
        let _running = slots.acquire(slots.line_up(1), || 1).await;
        // The first in line took its turn under a limit of 1 and waits on the running job.
        let first = slots.line_up(1);
        let waiting = tokio::spawn({
            let slots = slots.clone();
            async move { slots.acquire(first, || 1).await }
        });
        tokio::task::yield_now().await;
        // The config now says 3: the next job queued makes room for it.
        let _next = slots.line_up(3);
        let got = tokio::time::timeout(std::time::Duration::from_secs(10), waiting).await;
        assert!(got.is_ok(), "the line stayed shut behind the running job");
    }
}
