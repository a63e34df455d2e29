//! The calls in flight that are work a stop would cut (`Method::WORK`), counted by method for
//! `daemon.status`: a client replaces a daemon of another build only while this is empty and
//! no job runs.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use scafld_protocol::methods::Serving as Count;

/// The table of calls being served, by method name.
#[derive(Default, Clone)]
pub struct Serving(Arc<Mutex<BTreeMap<&'static str, u64>>>);

/// One call counted while it lives: dropped when the call answers, or when its future is
/// dropped unanswered (its caller hung up).
pub struct Call {
    table: Serving,
    method: &'static str,
}

impl Serving {
    /// Count a call of `method` until the returned guard is dropped.
    pub fn begin(&self, method: &'static str) -> Call {
        *crate::sync::lock(&self.0).entry(method).or_default() += 1;
        Call { table: self.clone(), method }
    }

    /// Run `then` with the table held unless a call is counted in it (those are the error):
    /// a call counts itself before it checks whether the daemon stops, so when `then`
    /// begins the stop, no call starts between this check and the stop.
    pub fn unless_serving<T>(&self, then: impl FnOnce() -> T) -> Result<T, Vec<Count>> {
        let table = crate::sync::lock(&self.0);
        if !table.is_empty() {
            return Err(table
                .iter()
                .map(|(method, calls)| Count { method: method.to_string(), calls: *calls })
                .collect());
        }
        let done = then();
        drop(table);
        Ok(done)
    }

    /// The calls in flight, by method (in name order).
    pub fn counts(&self) -> Vec<Count> {
        crate::sync::lock(&self.0)
            .iter()
            .map(|(method, calls)| Count { method: method.to_string(), calls: *calls })
            .collect()
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        let mut table = crate::sync::lock(&self.table.0);
        if let Some(calls) = table.get_mut(self.method) {
            *calls -= 1;
            if *calls == 0 {
                table.remove(self.method);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_counts_until_its_guard_is_dropped() {
        let serving = Serving::default();
        let first = serving.begin("task.finalize");
        let second = serving.begin("task.finalize");
        assert_eq!(serving.counts(), vec![Count { method: "task.finalize".into(), calls: 2 }]);
        drop(first);
        drop(second);
        assert!(serving.counts().is_empty());
    }

    #[test]
    fn nothing_runs_unless_the_table_is_empty() {
        let serving = Serving::default();
        let call = serving.begin("task.build");
        assert_eq!(serving.unless_serving(|| 1), Err(vec![Count { method: "task.build".into(), calls: 1 }]));
        drop(call);
        assert_eq!(serving.unless_serving(|| 1), Ok(1));
    }
}
