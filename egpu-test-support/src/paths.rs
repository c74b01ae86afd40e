//! Where the tests' files are, found at run time.
//!
//! Test binaries do not always run where they were built: the GPU bundle (`scripts/gpu-bundle`)
//! runs them on another machine, from a copy of the working tree, each in its package's folder
//! with `CARGO_MANIFEST_DIR` set to it, as `cargo test` does. Folders compiled in with
//! `env!("CARGO_MANIFEST_DIR")` do not exist there, so they are only the fallback.

use std::path::{Path, PathBuf};

/// The workspace's root folder: the parent of `$CARGO_MANIFEST_DIR` when it is set at run time
/// (every package is a folder of the root), else the parent of this crate's folder as it was
/// when built; canonical when it exists.
pub fn workspace_root() -> PathBuf {
    let package = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let root = package.join("..");
    root.canonicalize().unwrap_or(root)
}

/// `relative` under the [`workspace_root`] (`"tests/ptx/saxpy.ptx"`).
pub fn workspace_path(relative: impl AsRef<Path>) -> PathBuf {
    workspace_root().join(relative)
}

/// The text of file `relative` under the [`workspace_root`].
///
/// # Panics
///
/// When it cannot be read, naming the file.
pub fn read_workspace_file(relative: impl AsRef<Path>) -> String {
    let path = workspace_path(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The files of folder `dir` whose names end in `.ext`, sorted.
///
/// # Panics
///
/// When the folder cannot be read, naming it.
pub fn files_with_extension(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.unwrap_or_else(|e| panic!("{}: {e}", dir.display())).path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    files.sort();
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_holds_the_workspace() {
        let root = workspace_root();
        let manifest = std::fs::read_to_string(root.join("Cargo.toml")).expect("Cargo.toml");
        assert!(manifest.contains("[workspace]"), "{}", root.display());
        assert!(read_workspace_file("egpu-test-support/Cargo.toml").contains("publish = false"));
    }

    #[test]
    fn files_are_listed_sorted_by_extension() {
        let files = files_with_extension(&workspace_path("egpu-test-support/src"), "rs");
        let names: Vec<_> = files.iter().filter_map(|p| p.file_name()?.to_str()).collect();
        assert!(names.is_sorted() && names.contains(&"lib.rs") && names.contains(&"rng.rs"));
        assert!(files.iter().all(|p| p.extension().is_some_and(|x| x == "rs")), "{files:?}");
    }
}
