//! Helpers shared by the integration tests (each test binary uses a different subset).
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::mpsc;
use std::time::Duration;

/// A shared-memory name unique to this test process and test.
pub(crate) fn unique_name(test: &str) -> String {
    format!("egpu-maps-test-{}-{test}", std::process::id())
}

/// The file behind shared-memory object `name`.
pub(crate) fn shm_path(name: &str) -> PathBuf {
    PathBuf::from("/dev/shm").join(name)
}

/// The id of a process that has certainly exited (and been reaped).
pub(crate) fn dead_pid() -> u32 {
    let mut child = std::process::Command::new("true").spawn().expect("spawn `true`");
    let pid = child.id();
    assert!(child.wait().expect("wait for `true`").success());
    pid
}

/// Runs `f` on a thread of its own and waits at most `limit` for its result: `None` when it
/// has not finished by then (the thread is left running) or panicked.
pub(crate) fn within<T: Send + 'static>(
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).ok()
}

/// Removes a file under /dev/shm on drop (for objects written directly by a test).
pub(crate) struct ShmFile(pub(crate) PathBuf);

impl ShmFile {
    /// Writes `bytes` as shared-memory object `name` with permission bits `mode`.
    pub(crate) fn write(name: &str, bytes: &[u8], mode: u32) -> ShmFile {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        let path = shm_path(name);
        let file = ShmFile(path.clone());
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .expect("create the shared-memory file");
        std::io::Write::write_all(&mut f, bytes).expect("write the shared-memory file");
        // The umask may have cleared bits of the mode asked for at creation: set it exactly.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode))
            .expect("set the file's mode");
        file
    }
}

impl Drop for ShmFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
