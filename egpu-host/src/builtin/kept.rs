//! Shared objects kept past their process's exit for the `egpu run` that started it: a process
//! that ends before `egpu run` has opened its maps (a short one, between two of its looks)
//! would otherwise take its counts and spans with it. Under `egpu run` (which names itself in
//! `EGPU_KEEP_FOR`), the preloaded library leaves its objects at exit and marks them
//! `egpu-<pid>-kept-by-<run>`; `egpu run` opens them as its descendant's, and removes them when
//! it has pushed them. [`clean_dead`](super::clean_dead) leaves them while that `egpu run`
//! lives.

use super::{alive, shared_name};

/// The variable that names the `egpu run` that keeps a process's objects.
pub const KEEP_FOR: &str = "EGPU_KEEP_FOR";

/// The marker's name.
fn marker(pid: u32, by: u32) -> String {
    shared_name(pid, &format!("kept-by-{by}"))
}

/// Marks process `pid`'s objects as kept for `egpu run` process `by`; false when the mark
/// could not be made (the objects should then be removed as usual).
pub fn keep(pid: u32, by: u32) -> bool {
    std::fs::write(format!("/dev/shm/{}", marker(pid, by)), b"").is_ok()
}

/// The `egpu run` `EGPU_KEEP_FOR` names, when it is alive: the one this process's objects are
/// to be kept for at its exit.
pub fn keeper() -> Option<u32> {
    let by: u32 = std::env::var(KEEP_FOR).ok()?.parse().ok()?;
    (by != std::process::id() && alive(by)).then_some(by)
}

/// The `(pid, by)` of every marker.
fn markers() -> Vec<(u32, u32)> {
    let Ok(entries) = std::fs::read_dir("/dev/shm") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|name| {
            let (pid, by) = name.strip_prefix("egpu-")?.split_once("-kept-by-")?;
            Some((pid.parse().ok()?, by.parse().ok()?))
        })
        .collect()
}

/// The processes whose objects are kept for `by`.
pub fn kept_for(by: u32) -> Vec<u32> {
    markers().into_iter().filter(|&(_, b)| b == by).map(|(p, _)| p).collect()
}

/// The processes whose objects are kept for an `egpu run` that is alive.
pub fn kept() -> std::collections::BTreeSet<u32> {
    markers().into_iter().filter(|&(_, by)| alive(by)).map(|(p, _)| p).collect()
}

/// Removes process `pid`'s markers.
pub(super) fn unmark(pid: u32) {
    for (p, by) in markers() {
        if p == pid {
            let _ = std::fs::remove_file(format!("/dev/shm/{}", marker(p, by)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process's objects kept for a live `egpu run` survive `clean_dead`, and go with
    /// `unlink`; kept for one that has ended, `clean_dead` removes them.
    #[test]
    fn kept_objects_outlive_their_process_while_their_keeper_lives() {
        let me = std::process::id();
        // A pid no process has (beyond the default pid_max), with a `launches` object.
        let dead = 4_194_304 + me % 1000;
        let launches = format!("/dev/shm/{}", shared_name(dead, "launches"));
        std::fs::write(&launches, b"").expect("an object");
        assert!(keep(dead, me));
        assert!(kept_for(me).contains(&dead) && kept().contains(&dead));
        super::super::clean_dead();
        assert!(std::path::Path::new(&launches).exists(), "removed while its keeper lives");
        super::super::unlink(dead);
        assert!(!std::path::Path::new(&launches).exists() && !kept_for(me).contains(&dead));
        // Kept for a process that is gone: cleaned.
        std::fs::write(&launches, b"").expect("an object");
        assert!(keep(dead, dead + 1));
        assert!(!kept().contains(&dead));
        super::super::clean_dead();
        assert!(!std::path::Path::new(&launches).exists() && markers().iter().all(|m| m.0 != dead));
    }
}
