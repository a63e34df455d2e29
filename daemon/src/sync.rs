//! Lock helpers that survive a poisoned lock. A panic in one handler marks the lock poisoned;
//! `expect` on every later acquisition would then wedge the whole daemon. The data behind these
//! locks is kept consistent by each critical section (no section leaves it half-changed before
//! a call that can panic), so the daemon goes on with it.

use std::sync::{Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

pub fn read<T>(rw: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    rw.read().unwrap_or_else(PoisonError::into_inner)
}

pub fn write<T>(rw: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    rw.write().unwrap_or_else(PoisonError::into_inner)
}
