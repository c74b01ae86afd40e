//! The book stays true to the code: every chapter in `SUMMARY.md` exists, and every
//! `{{#include}}` names a file of the repository (so the code the book shows is code that builds).

use std::path::{Path, PathBuf};

fn book_src() -> PathBuf {
    egpu_test_support::workspace_path("book/src")
}

fn chapters(src: &Path) -> Vec<PathBuf> {
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).expect("book/src/SUMMARY.md");
    summary
        .lines()
        .filter_map(|l| l.split_once("](").and_then(|(_, rest)| rest.split_once(')')))
        .map(|(path, _)| src.join(path))
        .collect()
}

#[test]
fn every_chapter_exists_and_every_include_resolves() {
    let src = book_src();
    let chapters = chapters(&src);
    assert!(chapters.len() >= 3, "SUMMARY.md lists {} chapters", chapters.len());
    let mut includes = 0;
    for chapter in &chapters {
        let text = std::fs::read_to_string(chapter)
            .unwrap_or_else(|e| panic!("{} is listed in SUMMARY.md: {e}", chapter.display()));
        for (_, rest) in text.match_indices("{{#include ").map(|(i, _)| text.split_at(i)) {
            let target = rest["{{#include ".len()..].split("}}").next().unwrap_or_default();
            let file = target.split(':').next().unwrap_or_default().trim();
            let path = chapter.parent().expect("chapter folder").join(file);
            assert!(path.is_file(), "{} includes {file}, which does not exist", chapter.display());
            includes += 1;
        }
    }
    assert!(includes >= 2, "the book includes only {includes} files");
}

/// Every Rust example of the book is compiled: a chapter with a `rust` block is one of the
/// doctest chapters `egpu/src/lib.rs` includes, and no block is `ignore`d unless it is an
/// `{{#include}}` of a file that builds on its own (the quickstart example).
#[test]
fn every_rust_example_of_the_book_is_compiled() {
    let src = book_src();
    let facade = std::fs::read_to_string(egpu_test_support::workspace_path("egpu/src/lib.rs"))
        .expect("egpu/src/lib.rs");
    let mut compiled = 0;
    for chapter in chapters(&src) {
        let text = std::fs::read_to_string(&chapter).expect("a chapter");
        let name = chapter.file_name().and_then(|n| n.to_str()).expect("a file name");
        let mut blocks = text.split("```rust").skip(1);
        let mut any = false;
        for block in blocks.by_ref() {
            let (info, body) = block.split_once('\n').unwrap_or((block, ""));
            if info.contains("ignore") {
                let included = body.trim_start().starts_with("{{#include ../../examples/");
                assert!(included, "{name}: a `rust{info}` block that is not compiled");
            } else {
                any = true;
            }
        }
        if any {
            let doctest = format!("#[doc = include_str!(\"../../book/src/{name}\")]");
            assert!(
                facade.contains(&doctest),
                "{name} has Rust examples: egpu/src/lib.rs must include it"
            );
            compiled += 1;
        }
    }
    assert!(compiled >= 6, "only {compiled} chapters with compiled examples");
}
