//! The assembler, disassembler and program checks over the bpf_conformance suite: every program
//! assembles, lists back into the same slots, and is a well-formed [`Program`].
//!
//! The suite is found at `$EGPU_CONFORMANCE_DIR`, else at `tests/conformance` in the workspace
//! (`egpu_ebpf::conformance::suite_dir`). Where it is missing the test says so and
//! passes, unless `EGPU_REQUIRE_CONFORMANCE=1`.

use egpu_ebpf::conformance::suite_dir;
use egpu_ebpf::insn::slots_to_bytes;
use egpu_ebpf::{AttachPoint, Insn, Program, assemble, disassemble};
use egpu_test_support::{files_with_extension, workspace_root};

/// Fewer files than this means the folder is not the suite (or lost most of it).
const MIN_FILES: usize = 300;

/// The lines of section `name` (`-- name` up to the next line starting with `-- `).
fn section(data: &str, name: &str) -> Option<String> {
    let mut lines = data.lines();
    lines.find(|l| l.trim_end() == format!("-- {name}"))?;
    let body: Vec<&str> = lines.take_while(|l| !l.starts_with("-- ")).collect();
    Some(body.join("\n"))
}

/// The `-- raw` section: one 64-bit slot per line, as a little-endian number.
fn raw_slots(raw: &str) -> Vec<Insn> {
    raw.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| {
            let hex = l.strip_prefix("0x").unwrap_or(l);
            let word = u64::from_str_radix(hex, 16).unwrap_or_else(|e| panic!("raw `{l}`: {e}"));
            Insn::from_bytes(word.to_le_bytes())
        })
        .collect()
}

/// Checks one file; the error says what went wrong.
fn check(data: &str) -> Result<(), String> {
    let asm = section(data, "asm").ok_or("no `-- asm` section")?;
    let slots = assemble(&asm).map_err(|e| format!("does not assemble: {e}"))?;
    if slots.is_empty() {
        return Err("assembles to nothing".into());
    }
    let listing = disassemble(&slots).map_err(|e| format!("does not disassemble: {e}"))?;
    let again = assemble(&listing)
        .map_err(|e| format!("listing does not assemble: {e}\nlisting:\n{listing}"))?;
    if again != slots {
        return Err(format!("listing assembles into other slots\nlisting:\n{listing}"));
    }
    if let Some(raw) = section(data, "raw") {
        let expected = raw_slots(&raw);
        if expected != slots {
            return Err(format!("assembles into {slots:?}, not the raw {expected:?}"));
        }
    }
    let bytes = slots_to_bytes(&slots);
    let program = Program::new(slots, vec![], AttachPoint::User { ctx_size: 0 })
        .map_err(|e| format!("is not a program: {e}\nlisting:\n{listing}"))?;
    if program.disassemble() != listing {
        return Err("Program::disassemble differs from disassemble".into());
    }
    if program.to_bytes() != bytes {
        return Err("Program::to_bytes differs from the assembled slots".into());
    }
    Ok(())
}

#[test]
fn conformance_programs_round_trip_and_are_well_formed() {
    let Some(dir) = suite_dir(&workspace_root()) else { return };
    let files = files_with_extension(&dir, "data");
    assert!(
        files.len() >= MIN_FILES,
        "{} has {} .data files, expected at least {MIN_FILES}",
        dir.display(),
        files.len()
    );
    let mut failures = Vec::new();
    for path in &files {
        let data =
            std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        if let Err(why) = check(&data) {
            let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
            failures.push(format!("{name}: {why}"));
        }
    }
    println!("{} conformance files, {} failures", files.len(), failures.len());
    assert!(
        failures.is_empty(),
        "{} of {} conformance files fail:\n{}",
        failures.len(),
        files.len(),
        failures.join("\n")
    );
}

#[test]
fn section_parsing_and_checks() {
    let data =
        "# c\n-- asm\nmov %r0, 1\n\nexit\n-- raw\n0x00000001000000b7\n0x95\n-- result\n0x1\n";
    assert_eq!(section(data, "asm").as_deref(), Some("mov %r0, 1\n\nexit"));
    assert_eq!(section(data, "result").as_deref(), Some("0x1"));
    assert_eq!(section(data, "mem"), None);
    let raw = raw_slots(&section(data, "raw").unwrap());
    assert_eq!(raw, assemble("mov %r0, 1\nexit").unwrap());
    assert_eq!(check(data), Ok(()));
    // The checks can fail.
    let wrong_raw = data.replace("0x95", "0x96");
    assert!(check(&wrong_raw).unwrap_err().contains("not the raw"));
    let no_exit = "-- asm\nmov %r0, 1\n-- result\n0x1\n";
    assert!(check(no_exit).unwrap_err().starts_with("is not a program: instruction 0:"));
    assert!(check("-- asm\nfrob\n").unwrap_err().starts_with("does not assemble: line 1"));
    assert_eq!(check("-- result\n0x1\n"), Err("no `-- asm` section".into()));
}
