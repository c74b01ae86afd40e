//! What every program egpu starts runs with, whatever its environment says: NVLink multicast
//! off. NCCL's NVLink SHARP (NVLS) collectives, PyTorch's symmetric memory and NVSHMEM make
//! multicast objects (`cuMulticastCreate`) that span the GPUs of a node, a resource of the whole
//! machine beyond the process; on the shared machines egpu is built and checked on they must not
//! be made. So `egpu run`, `egpu mem run` and `egpu cxl` (all through [`crate::run::run_cmd`])
//! start their command with the three switches below forced: a value the user set otherwise is
//! replaced, with a note on standard error, never silently. egpu itself never calls
//! `cuMulticastCreate` (the preloaded library names no multicast function: its tests check).

use std::ffi::{OsStr, OsString};

/// The variables, and the value each is forced to.
pub(crate) const MULTICAST_OFF: [(&str, &str); 3] = [
    ("NCCL_NVLS_ENABLE", "0"),
    ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
    ("NVSHMEM_DISABLE_NVLS", "1"),
];

/// Sets [`MULTICAST_OFF`] in `child`'s environment; `given(name)` is what the user set (the
/// environment egpu inherited, or egpu's own additions), if anything. Returns a note for each
/// value replaced.
pub(crate) fn multicast_off(
    child: &mut std::process::Command,
    given: impl Fn(&str) -> Option<OsString>,
) -> Vec<String> {
    let mut notes = Vec::new();
    for (name, value) in MULTICAST_OFF {
        if let Some(was) = given(name).filter(|was| was != OsStr::new(value)) {
            notes.push(format!(
                "egpu: {name}={} replaced by {name}={value}: programs under egpu run with \
                 NVLink multicast off",
                was.to_string_lossy()
            ));
        }
        child.env(name, value);
    }
    notes
}

/// What the user set for `name`: `extra`'s last value for it (what egpu adds to the command's
/// environment), else the environment egpu inherited.
pub(crate) fn given(extra: &[(OsString, OsString)], name: &str) -> Option<OsString> {
    extra
        .iter()
        .rev()
        .find(|(k, _)| k == OsStr::new(name))
        .map(|(_, v)| v.clone())
        .or_else(|| std::env::var_os(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_switches_are_forced_and_a_different_value_is_noted() {
        let mut child = std::process::Command::new("true");
        let notes = multicast_off(&mut child, |name| match name {
            "NCCL_NVLS_ENABLE" => Some("1".into()),
            "NVSHMEM_DISABLE_NVLS" => Some("1".into()),
            _ => None,
        });
        let mut set: Vec<(String, String)> = child
            .get_envs()
            .map(|(k, v)| {
                let v = v.unwrap_or_default().to_string_lossy().into_owned();
                (k.to_string_lossy().into_owned(), v)
            })
            .collect();
        let mut want: Vec<(String, String)> =
            MULTICAST_OFF.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        set.sort();
        want.sort();
        assert_eq!(set, want);
        // Only the one that differed is noted.
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("NCCL_NVLS_ENABLE=1 replaced by NCCL_NVLS_ENABLE=0"));
    }

    #[test]
    fn what_egpu_adds_wins_over_the_inherited_environment() {
        let extra =
            [("NCCL_NVLS_ENABLE".into(), "2".into()), ("NCCL_NVLS_ENABLE".into(), "3".into())];
        assert_eq!(given(&extra, "NCCL_NVLS_ENABLE"), Some("3".into()));
        assert_eq!(given(&extra, "EGPU_SURELY_NOT_SET_ANYWHERE"), None);
    }
}
