//! Pure domain logic: values in, values out. Nothing here touches the filesystem, the clock or
//! processes; adapters in the rest of the crate do that and pass the results in.

pub mod acceptance;
pub mod build;
pub mod consensus;
pub mod dossier;
pub mod evidence;
pub mod handoff;
pub mod harden;
pub mod import;
pub mod job;
pub mod json_schema;
pub mod ledger;
pub mod lifecycle;
pub mod material;
pub mod next;
pub mod packet;
pub mod receipt;
pub mod recovery;
pub mod retention;
pub mod review;
pub mod spec;
pub mod task_id;
pub mod template;
pub mod timestamp;
