//! Ledgers parsed recently, kept per opening of the database: a `status` or a build step reads
//! a task's whole ledger, and parsing its JSON again on every call was a tenth of a status's
//! daemon CPU for a task with history. An entry is only used while the task's last sequence
//! number is still the one it was parsed at (ledgers only grow; a reopen starts a new cache).

use std::collections::HashMap;
use std::sync::Arc;

use crate::domain::ledger::LedgerEntry;

/// The raw bytes of the ledgers kept, at most: the least recently used go first.
const BUDGET: usize = 8 << 20;

#[derive(Default)]
pub(super) struct ParsedLedgers {
    by_prefix: HashMap<Vec<u8>, Parsed>,
    bytes: usize,
    /// A counter standing for time: each use takes the next value.
    clock: u64,
}

struct Parsed {
    last_seq: u64,
    bytes: usize,
    used: u64,
    entries: Arc<[LedgerEntry]>,
}

impl ParsedLedgers {
    /// The ledger under `prefix` when it was parsed with `last_seq` as its last entry.
    pub(super) fn get(&mut self, prefix: &[u8], last_seq: u64) -> Option<Arc<[LedgerEntry]>> {
        self.clock += 1;
        let parsed = self.by_prefix.get_mut(prefix).filter(|p| p.last_seq == last_seq)?;
        parsed.used = self.clock;
        Some(parsed.entries.clone())
    }

    /// Keep `entries`, parsed from `bytes` of JSON, as the ledger under `prefix`; one larger
    /// than the whole budget is not kept.
    pub(super) fn put(&mut self, prefix: Vec<u8>, bytes: usize, entries: Arc<[LedgerEntry]>) {
        if let Some(old) = self.by_prefix.remove(&prefix) {
            self.bytes -= old.bytes;
        }
        if bytes > BUDGET {
            return;
        }
        while self.bytes + bytes > BUDGET {
            let Some(oldest) = self.by_prefix.iter().min_by_key(|(_, p)| p.used).map(|(k, _)| k.clone()) else {
                break;
            };
            if let Some(evicted) = self.by_prefix.remove(&oldest) {
                self.bytes -= evicted.bytes;
            }
        }
        self.clock += 1;
        let last_seq = entries.last().map_or(0, |e| e.seq);
        self.bytes += bytes;
        self.by_prefix.insert(prefix, Parsed { last_seq, bytes, used: self.clock, entries });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ledger::LedgerEvent;

    fn ledger(seqs: std::ops::RangeInclusive<u64>) -> Arc<[LedgerEntry]> {
        seqs.map(|seq| LedgerEntry {
            seq,
            recorded_at: "now".into(),
            event: LedgerEvent::Build { status: "active".into(), reason: String::new() },
        })
        .collect()
    }

    #[test]
    fn a_ledger_is_reused_only_while_its_last_entry_is_the_same() {
        let mut parsed = ParsedLedgers::default();
        parsed.put(b"w/t/".to_vec(), 100, ledger(1..=3));
        assert_eq!(parsed.get(b"w/t/", 3).unwrap().len(), 3);
        assert!(parsed.get(b"w/t/", 4).is_none(), "an entry appended since");
        assert!(parsed.get(b"w/u/", 3).is_none());
        parsed.put(b"w/t/".to_vec(), 120, ledger(1..=4));
        assert_eq!(parsed.get(b"w/t/", 4).unwrap().len(), 4);
        assert_eq!(parsed.bytes, 120);
    }

    #[test]
    fn the_least_recently_used_ledgers_go_first_and_a_huge_one_is_never_kept() {
        let mut parsed = ParsedLedgers::default();
        let third = BUDGET / 3;
        for task in [b"w/a/", b"w/b/", b"w/c/"] {
            parsed.put(task.to_vec(), third, ledger(1..=1));
        }
        assert!(parsed.get(b"w/a/", 1).is_some()); // b is now the oldest
        parsed.put(b"w/d/".to_vec(), third, ledger(1..=1));
        assert!(parsed.get(b"w/b/", 1).is_none());
        assert!(parsed.get(b"w/a/", 1).is_some() && parsed.get(b"w/c/", 1).is_some());
        parsed.put(b"w/e/".to_vec(), BUDGET + 1, ledger(1..=1));
        assert!(parsed.get(b"w/e/", 1).is_none());
        assert!(parsed.bytes <= BUDGET);
    }
}
