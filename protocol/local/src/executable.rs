//! Which build of an executable a file is ([`scafld_protocol::methods::Executable`]): the daemon
//! reads its own as it starts, the client that of the `scafldd` it would start, and a daemon
//! left running by another build is told apart by comparing the two.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use scafld_protocol::methods::Executable;

/// `path` as `stat` sees it now (through symlinks), named `path`.
pub fn identify(path: &Path) -> std::io::Result<Executable> {
    let meta = std::fs::metadata(path)?;
    Ok(of(path, &meta))
}

/// The file this process was started from, as it is now (the kernel's link to it, so the file
/// is the one started even when something was renamed over its path since), named by its path.
pub fn this_process() -> std::io::Result<Executable> {
    let path = std::env::current_exe()?;
    let meta = std::fs::metadata("/proc/self/exe").or_else(|_| std::fs::metadata(&path))?;
    Ok(of(&path, &meta))
}

fn of(path: &Path, meta: &std::fs::Metadata) -> Executable {
    Executable {
        path: path.display().to_string(),
        device: meta.dev(),
        inode: meta.ino(),
        size: meta.size(),
        modified_seconds: meta.mtime(),
        modified_nanos: u32::try_from(meta.mtime_nsec()).unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_replaced_at_its_path_is_another_build() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scafldd");
        std::fs::write(&path, b"one").unwrap();
        let before = identify(&path).unwrap();
        assert!(before.same_build(&identify(&path).unwrap()));
        let staged = dir.path().join("staged");
        std::fs::write(&staged, b"one").unwrap();
        std::fs::rename(&staged, &path).unwrap();
        assert!(!before.same_build(&identify(&path).unwrap()), "a new inode");
    }
}
