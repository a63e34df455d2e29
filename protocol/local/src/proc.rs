//! What `/proc` says about a process: one reader of `/proc/PID/stat` for the runner (a
//! leader's start), the reaper (state, parent) and the daemon's sweeps, read with one `read`
//! since the runner reads it for every command a build step runs.

/// The fields of `/proc/PID/stat` this project reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// Field 3: `R`, `S`, `D`, `T` stopped, `t` traced, `Z` a zombie, `X` dead, ...
    pub state: char,
    /// Field 4.
    pub parent: i32,
    /// Field 5.
    pub group: i32,
    /// Field 22: the start, in clock ticks since boot.
    pub start_ticks: u64,
}

impl Stat {
    /// Dead, whether reaped yet or not.
    pub fn is_dead(&self) -> bool {
        matches!(self.state, 'Z' | 'X')
    }
}

/// A process's stat, or `None` when there is no such process (or the kernel's text is not the
/// one this reads). The command name (field 2) may hold spaces and parentheses, and is any
/// bytes (a program named in Latin-1, a UTF-8 name cut at 15 bytes), so fields are counted
/// after its last `)` and only they must be text.
pub fn stat(pid: i32) -> Option<Stat> {
    let mut buf = [0; 4096];
    let bytes = read_small_bytes(&format!("/proc/{pid}/stat"), &mut buf)?;
    let after_name = &bytes[bytes.iter().rposition(|b| *b == b')')? + 1..];
    let fields: Vec<&str> = std::str::from_utf8(after_name).ok()?.split_whitespace().take(20).collect();
    Some(Stat {
        state: fields.first()?.chars().next()?,
        parent: fields.get(1)?.parse().ok()?,
        group: fields.get(2)?.parse().ok()?,
        start_ticks: fields.get(19)?.parse().ok()?,
    })
}

/// A small `/proc` file's text, read with one `read` into `buf` (the kernel writes such a file
/// whole into a buffer big enough; `fs::read_to_string` would also stat it and probe).
pub fn read_small<'b>(path: &str, buf: &'b mut [u8]) -> Option<&'b str> {
    std::str::from_utf8(read_small_bytes(path, buf)?).ok()
}

/// [`read_small`]'s bytes, whatever they are.
fn read_small_bytes<'b>(path: &str, buf: &'b mut [u8]) -> Option<&'b [u8]> {
    use std::io::Read;
    let n = std::fs::File::open(path).ok()?.read(buf).ok()?;
    // A file that filled the buffer may have been cut short.
    (n < buf.len()).then_some(&buf[..n])
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    #[test]
    fn fields_are_read_past_a_name_with_spaces_and_parentheses() {
        // A program named to look like the fields after it: `x) R 1 2`.
        let dir = std::env::temp_dir().join(format!("scafld-stat-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let program = dir.join("x) R 1 2");
        std::os::unix::fs::symlink("/bin/sleep", &program).unwrap();
        let mut child = Command::new(&program).arg("5").spawn().unwrap();
        let pid = child.id() as i32;
        // As `ps` reads them: counted after the name's last `)`.
        let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let after: Vec<&str> = text.rsplit_once(')').unwrap().1.split_whitespace().collect();
        let stat = super::stat(pid).unwrap();
        assert_eq!(stat.parent, std::process::id() as i32, "{text}");
        assert_eq!(stat.group, after[2].parse::<i32>().unwrap(), "{text}");
        assert_eq!(stat.start_ticks, after[19].parse::<u64>().unwrap(), "{text}");
        assert!(!stat.is_dead());
        assert_eq!(super::stat(i32::MAX), None);
        child.kill().unwrap();
        child.wait().unwrap();
        // A name that is not UTF-8 (the kernel keeps its bytes): the fields after it still read.
        use std::os::unix::ffi::OsStrExt;
        let latin1 = dir.join(std::ffi::OsStr::from_bytes(b"caf\xe9"));
        std::os::unix::fs::symlink("/bin/sleep", &latin1).unwrap();
        let mut child = Command::new(&latin1).arg("5").spawn().unwrap();
        let stat = super::stat(child.id() as i32).expect("the stat of a process named in Latin-1");
        assert_eq!(stat.parent, std::process::id() as i32);
        child.kill().unwrap();
        child.wait().unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
