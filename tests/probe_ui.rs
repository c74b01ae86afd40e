//! Probe Rust's compile errors: every construct the compiler refuses has a file in `tests/ui/`,
//! and the error rustc prints for it (at the user's token) is kept next to it in a `.stderr`
//! file. `TRYBUILD=overwrite` rewrites the `.stderr` files after a deliberate change.

#[test]
fn rejected_constructs_have_clear_errors() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("../tests/ui/*.rs");
}
