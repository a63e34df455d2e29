//! The caller's environment of an unsettled review session: one 0600 file per session under
//! `<state dir>/caller-env/`, never in the database.
//!
//! Daemon-run reviewers start with the environment of the client that asked for the review
//! (auth variables included), and a daemon restarted mid-review needs it again. sled's log keeps
//! overwritten bytes until it compacts, so secrets stay out of it: they live in a file that is
//! removed once the session settles (a retry brings the retrying client's environment).

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use crate::domain::job::SessionRecord;

#[derive(Debug, Default)]
pub struct CallerEnvFiles {
    dir: PathBuf,
}

impl CallerEnvFiles {
    pub fn new(state_dir: &Path) -> CallerEnvFiles {
        CallerEnvFiles { dir: state_dir.join("caller-env") }
    }

    fn file(&self, key: &str) -> Option<PathBuf> {
        let plain = SessionRecord::is_plain_key(key);
        (plain && !self.dir.as_os_str().is_empty()).then(|| self.dir.join(format!("{key}.json")))
    }

    /// Write atomically (temp file, then rename), readable by the daemon's user only.
    pub fn save(&self, key: &str, env: &BTreeMap<String, String>) -> io::Result<()> {
        let Some(file) = self.file(key) else {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("not a session key: {key:?}")));
        };
        fs::DirBuilder::new().recursive(true).mode(0o700).create(&self.dir)?;
        crate::workspace::specfile::write_atomic_mode(&file, &serde_json::to_vec(env)?, 0o600)
    }

    /// The stored environment; empty when there is none or it cannot be read.
    pub fn load(&self, key: &str) -> BTreeMap<String, String> {
        let bytes = self.file(key).and_then(|f| fs::read(f).ok());
        bytes.and_then(|b| serde_json::from_slice(&b).ok()).unwrap_or_default()
    }

    pub fn remove(&self, key: &str) -> io::Result<()> {
        match self.file(key).map(fs::remove_file) {
            Some(Err(e)) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn saved_private_loaded_and_removed_and_path_like_keys_are_refused() {
        let state = std::env::temp_dir().join(format!("scafld-caller-env-{}", std::process::id()));
        let files = CallerEnvFiles::new(&state);
        let env = BTreeMap::from([("API_KEY".to_string(), "s3cret".to_string())]);
        files.save("abc123", &env).unwrap();
        let file = state.join("caller-env/abc123.json");
        assert_eq!(fs::metadata(&file).unwrap().permissions().mode() & 0o777, 0o600);
        assert_eq!(fs::metadata(state.join("caller-env")).unwrap().permissions().mode() & 0o777, 0o700);
        assert_eq!(files.load("abc123"), env);

        for key in ["../abc123", "a/b", "", "abc123.json"] {
            assert!(files.save(key, &env).is_err(), "{key:?} was accepted");
            assert!(files.load(key).is_empty());
        }
        fs::write(state.join("caller-env/bad.json"), "not json").unwrap();
        assert!(files.load("bad").is_empty(), "an unreadable file is no environment");

        files.remove("abc123").unwrap();
        assert!(!file.exists());
        files.remove("abc123").unwrap(); // already gone is fine
        fs::remove_dir_all(&state).unwrap();
    }
}
