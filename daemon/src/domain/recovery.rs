//! Which ledger history `scafldd --recover` keeps for a task: the entries the database still
//! reads back win; an exported ledger (`.scafld/runs/<task>/ledger.json`, which anyone who can
//! write the workspace can edit) only fills what the database lost, and only when it agrees
//! with every entry the database still holds, stays within the head the manifest recorded and,
//! where the manifest kept the ledger's chain digest, matches it entry for entry through that
//! head (an edited export, a review's verdict turned, does not). An export that does not is
//! refused whole for that task, with the reason.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use crate::domain::ledger::LedgerEntry;

/// What the manifest says about a task's ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Head {
    /// The sequence number of the task's last entry when the manifest was last saved.
    Recorded(u64),
    /// A manifest was read and names no ledger for the task.
    Unrecorded,
    /// No manifest could be read: an export cannot be checked against one.
    NoManifest,
}

/// The history kept for a task, and where its entries came from.
#[derive(Debug, Clone, PartialEq)]
pub struct Kept {
    /// Gap-free from sequence number 1.
    pub entries: Vec<LedgerEntry>,
    /// Sequence numbers of the kept entries that came from the export (none from the database).
    pub from_export: Vec<u64>,
    /// Whether export entries were taken with nothing to check their content against (no
    /// manifest, or no chain digest of this ledger in it).
    pub unchecked: bool,
    /// Why the export was refused, when it was.
    pub refused: Option<String>,
}

/// Keep the task's history: `held` (sequence number → entry, every entry any copy of the
/// database still reads back), filled from `export` where the database lost entries, if the
/// export agrees with `held` at every sequence number both have and adds nothing past `head`.
/// The result is cut at its first gap.
/// What the manifest recorded to check an export's content by: chain digests (see
/// `ledger::chain_digest`) through the head, and through the entry the last export ended at.
#[derive(Debug, Clone, Copy, Default)]
pub struct Digests<'a> {
    pub head: Option<&'a str>,
    pub exported: Option<(u64, &'a str)>,
}

/// `digests` hold what the export filled in to what was recorded: the chain through the head,
/// or through where the last export ended (one taken before later appends), must come out as
/// recorded; with neither reached, the entries are taken `unchecked`.
pub fn keep(
    held: &BTreeMap<u64, LedgerEntry>,
    export: Option<&[LedgerEntry]>,
    head: Head,
    digests: Digests<'_>,
) -> Kept {
    let kept = merge(held, export, head);
    let Head::Recorded(through) = head else { return kept };
    if kept.from_export.is_empty() {
        return kept;
    }
    let last = kept.entries.last().map_or(0, |e| e.seq);
    let check = match (digests.head, digests.exported) {
        (Some(digest), _) if last >= through => Some((through, digest)),
        (_, Some((seq, digest))) if last >= seq => Some((seq, digest)),
        // Nothing recorded to check it by: taken unchecked.
        (None, None) => return Kept { unchecked: true, ..kept },
        _ => None,
    };
    // Digests are recorded, but none where this export ends: it cannot be held to what the
    // database recorded (an export scafld wrote ends at its recorded point), so not taken.
    let Some((until, digest)) = check else {
        let reason = format!(
            "it ends at entry {last}, where nothing the manifest recorded can check it (export the ledger again with `scafld session <task> --export`)"
        );
        return Kept { refused: Some(reason), ..merge(held, None, head) };
    };
    if crate::domain::ledger::chain_digest(kept.entries.iter().take_while(|e| e.seq <= until)) == digest {
        // What the export adds past the point it was checked through cannot be checked (an
        // export scafld wrote ends there): not taken.
        let mut kept = kept;
        let checked = |e: &LedgerEntry| e.seq <= until || held.contains_key(&e.seq);
        let cut = kept.entries.iter().position(|e| !checked(e)).unwrap_or(kept.entries.len());
        kept.entries.truncate(cut);
        kept.from_export.retain(|seq| *seq <= cut as u64);
        return kept;
    }
    let reason = "its entries do not match what the database recorded (the manifest's digest of this ledger): edited, or not this ledger's export".to_string();
    Kept { refused: Some(reason), ..merge(held, None, head) }
}

/// [`keep`] without the digest: the database's entries, with an agreeing export's in its gaps.
fn merge(held: &BTreeMap<u64, LedgerEntry>, export: Option<&[LedgerEntry]>, head: Head) -> Kept {
    let mut merged = held.clone();
    let mut from_export = Vec::new();
    let mut refused = None;
    if let Some(export) = export {
        match check_export(held, export, head) {
            Ok(()) => {
                for entry in export {
                    if let Entry::Vacant(slot) = merged.entry(entry.seq) {
                        slot.insert(entry.clone());
                        from_export.push(entry.seq);
                    }
                }
            }
            Err(reason) => refused = Some(reason),
        }
    }
    let entries: Vec<LedgerEntry> =
        merged.into_values().enumerate().take_while(|(i, e)| e.seq == *i as u64 + 1).map(|(_, e)| e).collect();
    let last = entries.len() as u64;
    from_export.retain(|seq| *seq <= last);
    let unchecked = !from_export.is_empty() && head == Head::NoManifest;
    Kept { entries, from_export, unchecked, refused }
}

/// Why an export may not fill the database's gaps: an entry that differs from the database's
/// at the same sequence number, a sequence number repeated, or an entry the database does not
/// hold past the head the manifest recorded (or for a task it recorded none for).
fn check_export(held: &BTreeMap<u64, LedgerEntry>, export: &[LedgerEntry], head: Head) -> Result<(), String> {
    let mut reasons = Vec::new();
    // Ledgers count from 1: an entry 0 would sit before the database's first and cut the
    // merged history short at the gap after it.
    if export.iter().any(|e| e.seq == 0) {
        reasons.push("it holds an entry 0 (ledgers count from 1)".to_string());
    }
    let mut seen = std::collections::BTreeSet::new();
    if let Some(repeated) = export.iter().find(|e| !seen.insert(e.seq)) {
        reasons.push(format!("it holds entry {} twice", repeated.seq));
    }
    let differs: Vec<u64> =
        export.iter().filter(|e| held.get(&e.seq).is_some_and(|d| d != *e)).map(|e| e.seq).collect();
    if !differs.is_empty() {
        reasons.push(format!("{} from the database's", said(&differs, "differs", "differ")));
    }
    let added: Vec<u64> = export.iter().filter(|e| !held.contains_key(&e.seq)).map(|e| e.seq).collect();
    match head {
        Head::Recorded(head) => {
            let past: Vec<u64> = added.iter().copied().filter(|seq| *seq > head).collect();
            if !past.is_empty() {
                reasons.push(format!("{} past the manifest's recorded head ({head})", said(&past, "runs", "run")));
            }
        }
        Head::Unrecorded if !added.is_empty() => {
            reasons.push("the manifest records no ledger for this task".to_string());
        }
        Head::Unrecorded | Head::NoManifest => {}
    }
    if reasons.is_empty() { Ok(()) } else { Err(reasons.join("; ")) }
}

/// `entry 4 differs`, `entries 3-5, 8 differ`: sequence numbers for a person, with the verb.
fn said(seqs: &[u64], verb_one: &str, verb_many: &str) -> String {
    let (word, verb) = if seqs.len() == 1 { ("entry", verb_one) } else { ("entries", verb_many) };
    format!("{word} {} {verb}", ranges(seqs))
}

/// `4`, `3-5`, `2, 7-9`: sequence numbers, sorted, runs joined.
pub fn ranges(seqs: &[u64]) -> String {
    let mut sorted = seqs.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        parts.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
        i += 1;
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ledger::LedgerEvent;

    fn entry(seq: u64, reason: &str) -> LedgerEntry {
        LedgerEntry {
            seq,
            recorded_at: format!("2026-01-01T00:00:{seq:02}Z"),
            event: LedgerEvent::Fail { reason: reason.into() },
        }
    }

    fn held(seqs: &[u64]) -> BTreeMap<u64, LedgerEntry> {
        seqs.iter().map(|&s| (s, entry(s, "genuine"))).collect()
    }

    fn export(seqs: &[u64]) -> Vec<LedgerEntry> {
        seqs.iter().map(|&s| entry(s, "genuine")).collect()
    }

    /// The chain digest the manifest records for the genuine ledger through `head`.
    fn genuine(head: u64) -> String {
        crate::domain::ledger::chain_digest(&export(&(1..=head).collect::<Vec<_>>()))
    }

    /// What the manifest records: the head's digest only.
    fn at_head(digest: &str) -> Digests<'_> {
        Digests { head: Some(digest), exported: None }
    }

    /// The database lost entries (no copy holds them), so nothing contradicts an edited
    /// export but the manifest's digest: it is refused, and the database's entries kept.
    #[test]
    fn an_edited_export_filling_what_the_database_lost_fails_the_manifests_digest() {
        let mut edited = export(&[1, 2, 3, 4]);
        edited[2] = entry(3, "edited: the review passed");
        let kept = keep(&held(&[1, 2]), Some(&edited), Head::Recorded(4), at_head(&genuine(4)));
        assert_eq!((kept.entries.len(), kept.from_export.len()), (2, 0));
        assert!(kept.refused.unwrap().contains("do not match what the database recorded"));
        // The genuine export fills the gap; without a recorded digest it is taken unchecked.
        let kept = keep(&held(&[1, 2]), Some(&export(&[1, 2, 3, 4])), Head::Recorded(4), at_head(&genuine(4)));
        assert_eq!((kept.entries.len(), kept.refused, kept.unchecked), (4, None, false));
        let kept = keep(&held(&[]), Some(&edited), Head::Recorded(4), Digests::default());
        assert_eq!((kept.entries.len(), kept.unchecked), (4, true));
    }

    /// An export taken before later appends (the database then lost everything) ends short of
    /// the head: it is held to the digest recorded where it ends, not refused for not reaching
    /// the head; an edited one still fails, and one ending where nothing recorded can check it
    /// is refused (with digests recorded, it could be any history).
    #[test]
    fn an_export_taken_before_later_appends_is_held_to_where_it_ends() {
        let (head, at_3) = (genuine(5), genuine(3));
        let digests = Digests { head: Some(&head), exported: Some((3, &at_3)) };
        let kept = keep(&held(&[]), Some(&export(&[1, 2, 3])), Head::Recorded(5), digests);
        assert_eq!((kept.entries.len(), kept.refused, kept.unchecked), (3, None, false));
        let mut edited = export(&[1, 2, 3]);
        edited[1] = entry(2, "edited");
        let kept = keep(&held(&[]), Some(&edited), Head::Recorded(5), digests);
        assert!(kept.entries.is_empty() && kept.refused.is_some());
        let kept = keep(&held(&[]), Some(&export(&[1, 2])), Head::Recorded(5), digests);
        assert!(kept.entries.is_empty() && kept.refused.unwrap().contains("ends at entry 2"));
        // An entry added past where the export was checked (a forged review) is not taken.
        let mut padded = export(&[1, 2, 3, 4]);
        padded[3] = entry(4, "forged: the review passed");
        let kept = keep(&held(&[]), Some(&padded), Head::Recorded(5), digests);
        assert_eq!((kept.entries.len(), kept.from_export.clone(), kept.refused), (3, vec![1, 2, 3], None));
    }

    #[test]
    fn the_database_wins_and_an_agreeing_export_fills_only_its_gaps() {
        let kept = keep(&held(&[1, 2, 4]), Some(&export(&[1, 2, 3, 4, 5])), Head::Recorded(5), at_head(&genuine(5)));
        assert_eq!(kept.entries.len(), 5);
        assert_eq!(kept.from_export, vec![3, 5]);
        assert_eq!((kept.refused, kept.unchecked), (None, false));
        // Nothing to fill: every entry is the database's.
        let kept = keep(&held(&[1, 2, 3]), Some(&export(&[1, 2])), Head::Recorded(3), at_head(&genuine(3)));
        assert_eq!((kept.entries.len(), kept.from_export.len()), (3, 0));
    }

    #[test]
    fn an_export_that_contradicts_the_database_or_runs_past_the_head_is_refused() {
        let mut forged = export(&[1, 2, 3, 4]);
        forged[1] = entry(2, "edited");
        let kept = keep(&held(&[1, 2, 3]), Some(&forged), Head::Recorded(3), at_head(&genuine(3)));
        assert_eq!((kept.entries.len(), kept.from_export.len()), (3, 0));
        let reason = kept.refused.unwrap();
        assert!(reason.contains("entry 2 differs") && reason.contains("entry 4 runs past"), "{reason}");
        // Padding alone, past the head.
        let kept = keep(&held(&[1, 2, 3]), Some(&export(&[1, 2, 3, 4])), Head::Recorded(3), at_head(&genuine(3)));
        assert_eq!(kept.entries.len(), 3);
        assert!(kept.refused.unwrap().contains("recorded head (3)"));
        // Entries the database holds identically past a lagging head are no contribution.
        let kept = keep(&held(&[1, 2, 3, 4]), Some(&export(&[1, 2, 3, 4])), Head::Recorded(3), at_head(&genuine(3)));
        assert_eq!((kept.entries.len(), kept.refused), (4, None));
        // A task the manifest never recorded takes nothing from an export.
        let kept = keep(&held(&[]), Some(&export(&[1, 2])), Head::Unrecorded, Digests::default());
        assert!(kept.entries.is_empty() && kept.refused.unwrap().contains("records no ledger"));
        // Repeated entries.
        let kept = keep(&held(&[]), Some(&export(&[1, 1, 2])), Head::Recorded(2), at_head(&genuine(2)));
        assert!(kept.refused.unwrap().contains("entry 1 twice"));
        // An entry 0 added to an agreeing export would cut the whole history at its gap.
        let kept = keep(&held(&[1, 2, 3]), Some(&export(&[0, 1, 2, 3])), Head::Recorded(3), at_head(&genuine(3)));
        assert_eq!(kept.entries.len(), 3);
        assert!(kept.refused.unwrap().contains("entry 0"));
    }

    #[test]
    fn without_a_manifest_an_export_is_taken_unchecked_and_a_gap_ends_the_history() {
        let kept = keep(&held(&[]), Some(&export(&[1, 2, 4])), Head::NoManifest, Digests::default());
        assert_eq!(kept.entries.len(), 2);
        assert_eq!(kept.from_export, vec![1, 2]);
        assert!(kept.unchecked);
        assert_eq!(ranges(&[9, 2, 3, 4, 7]), "2-4, 7, 9");
    }
}
