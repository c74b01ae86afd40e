//! Malformed input: assembly text, slots and programs that must be refused with the exact error
//! naming the right line or instruction, and never a panic.

use egpu_ebpf::insn::{opcode as op, slots_from_bytes, slots_to_bytes};
use egpu_ebpf::{
    AsmError, AttachPoint, DecodeError, Insn, MapDef, MapKind, Program, ProgramError, assemble,
    decode, disassemble,
};

fn user() -> AttachPoint {
    AttachPoint::User { ctx_size: 0 }
}

/// `mov %r0, 0`, a filler slot.
const MOV0: Insn = Insn::new(op::ALU64 | op::MOV | op::K, 0, 0, 0, 0);
/// `exit`.
const EXIT: Insn = Insn::new(op::EXIT_OP, 0, 0, 0, 0);

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// Assembles `text`, which must fail; checks the line and pc the error names, that its message
/// contains `needle`, and that its Display names the line.
#[track_caller]
fn asm_err(text: &str, line: usize, pc: usize, needle: &str) -> AsmError {
    let err = match assemble(text) {
        Ok(slots) => panic!("assembled without error into {slots:?}:\n{text}"),
        Err(e) => e,
    };
    assert_eq!((err.line, err.pc), (line, pc), "wrong line/pc in {err:?}");
    assert!(err.message.contains(needle), "message {:?} lacks {needle:?}", err.message);
    let shown = err.to_string();
    assert!(shown.contains(&format!("line {line}")), "Display {shown:?} lacks the line");
    assert!(shown.contains(&err.message), "Display {shown:?} lacks the message");
    err
}

#[track_caller]
fn assert_names_pc(shown: &str, pc: usize) {
    assert!(
        shown.contains(&format!("instruction {pc}")),
        "Display {shown:?} does not name instruction {pc}"
    );
}

/// Checks that `slots` fail to decode with exactly `expected` (which names `pc`), and that
/// `disassemble`, `Program::new` and `Program::from_bytes` all refuse them with the same error.
#[track_caller]
fn decode_err(slots: &[Insn], expected: DecodeError, pc: usize) {
    assert_eq!(decode(slots).map(|_| ()), Err(expected.clone()), "decode of {slots:?}");
    assert_eq!(disassemble(slots).map(|_| ()), Err(expected.clone()), "disassemble");
    assert_names_pc(&expected.to_string(), pc);
    let perr = ProgramError::Decode(expected);
    assert_eq!(Program::new(slots.to_vec(), vec![], user()).map(|_| ()), Err(perr.clone()));
    let bytes = slots_to_bytes(slots);
    assert_eq!(Program::from_bytes(&bytes, vec![], user()).map(|_| ()), Err(perr.clone()));
    assert_names_pc(&perr.to_string(), pc);
}

/// `mov; mov; bad; exit`: the bad slot at pc 2.
fn at_pc2(bad: Insn) -> Vec<Insn> {
    vec![MOV0, MOV0, bad, EXIT]
}

/// Builds a program from `slots`, which must fail with exactly `expected`, naming `pc`.
#[track_caller]
fn program_err(slots: Vec<Insn>, expected: ProgramError, pc: Option<usize>) {
    let got = Program::new(slots.clone(), vec![], user()).map(|_| ());
    assert_eq!(got, Err(expected.clone()), "Program::new of {slots:?}");
    // The listing of a decodable but ill-formed program still works (relative offsets).
    if decode(&slots).is_ok() {
        let text = disassemble(&slots).expect("decodes, so it disassembles");
        assert_eq!(assemble(&text).expect("listing reassembles"), slots, "listing:\n{text}");
    }
    if let Some(pc) = pc {
        assert_names_pc(&expected.to_string(), pc);
    }
}

/// Assembles `text` (which must assemble) and checks `Program::new` refuses it.
#[track_caller]
fn asm_program_err(text: &str, expected: ProgramError, pc: usize) {
    let slots = assemble(text).unwrap_or_else(|e| panic!("{e}:\n{text}"));
    program_err(slots, expected, Some(pc));
}

#[track_caller]
fn assert_ok(text: &str) {
    let slots = assemble(text).unwrap_or_else(|e| panic!("{e}:\n{text}"));
    if let Err(e) = Program::new(slots, vec![], user()) {
        panic!("{e}:\n{text}");
    }
}

// ---------------------------------------------------------------------------------------------
// Malformed assembly
// ---------------------------------------------------------------------------------------------

#[test]
fn asm_unknown_mnemonic() {
    asm_err("mov %r0, 0\nfrob %r0\nexit", 2, 1, "unknown mnemonic `frob`");
    // A near miss of a real mnemonic, after a two-slot lddw.
    asm_err("lddw %r0, 1\nmovsx6464 %r0, %r1\nexit", 2, 2, "unknown mnemonic `movsx6464`");
    asm_err("ldxsdw %r0, [%r1]", 1, 0, "unknown mnemonic `ldxsdw`");
    asm_err("le8 %r0", 1, 0, "unknown mnemonic `le8`");
}

#[test]
fn asm_wrong_operand_count() {
    asm_err("mov %r0, 0\n\n  # comment\nmov %r0\nexit", 4, 1, "`mov` takes 2 operand(s), found 1");
    asm_err("exit %r0", 1, 0, "`exit` takes 0 operand(s), found 1");
    asm_err("jeq %r0, 0", 1, 0, "`jeq` takes 3 operand(s), found 2");
    asm_err("neg %r0, %r1", 1, 0, "`neg` takes 1 operand(s), found 2");
    asm_err("ja", 1, 0, "`ja` takes 1 operand(s), found 0");
    asm_err("call", 1, 0, "expected `call <n>`");
    asm_err("lock add [%r1]", 1, 0, "expected `lock [fetch] <op> [reg+off], reg`");
}

#[test]
fn asm_bad_register() {
    asm_err("mov %r0, 0\nmov %r11, 1\nexit", 2, 1, "`%r11`");
    asm_err("mov %r0, 0\nmov %r0, %rx\nexit", 2, 1, "`%rx`");
    asm_err("ldxw %r0, [%r16+4]", 1, 0, "`%r16`");
    asm_err("call %r256", 1, 0, "`%r256`");
}

#[test]
fn asm_immediate_out_of_32_bits() {
    asm_err("mov %r0, 0\nmov %r0, 0x100000000\nexit", 2, 1, "does not fit in 32 bits");
    asm_err("add32 %r0, -2147483649", 1, 0, "does not fit in 32 bits");
    asm_err("stw [%r10-4], 4294967296", 1, 0, "does not fit in 32 bits");
    asm_err("jeq %r0, 0x1ffffffff, +0", 1, 0, "does not fit in 32 bits");
    // The limits themselves assemble.
    assert_ok("mov %r0, 0xffffffff\nmov %r0, -2147483648\nexit");
    asm_err("lddw %r0, 0x10000000000000000", 1, 0, "does not fit in 64 bits");
}

#[test]
fn asm_bad_memory_operand() {
    asm_err("mov %r0, 0\nldxw %r0, %r1+4\nexit", 2, 1, "expected a memory operand");
    asm_err("ldxw %r0, [%r1*4]", 1, 0, "`%r1*4`");
    asm_err("stxw [%r1+x], %r2", 1, 0, "expected a memory operand");
    asm_err("stw [%r1+70000], 1", 1, 0, "does not fit in 16 bits");
    asm_err("stw [%r1-32769], 1", 1, 0, "does not fit in 16 bits");
}

#[test]
fn asm_undefined_label() {
    asm_err("mov %r0, 0\n# comment\n\nja nowhere\nexit", 4, 1, "undefined label `nowhere`");
    asm_err("call local nowhere\nexit", 1, 0, "undefined label `nowhere`");
}

#[test]
fn asm_duplicate_label() {
    asm_err("a:\nmov %r0, 0\na:\nexit", 3, 1, "label `a` is defined twice");
    asm_err("a: b: a: exit", 1, 0, "label `a` is defined twice");
}

#[test]
fn asm_jump_offset_not_16_bits() {
    const N: usize = 40_000;
    let movs = "mov %r0, 0\n".repeat(N);
    // Forward: the branch is on line 2, pc 1; the label is 40 000 slots away.
    let text = format!("mov %r0, 0\njeq %r1, 0, far\n{movs}far:\nexit");
    asm_err(&text, 2, 1, "offset 40000 to `far` does not fit in 16 bits");
    let text = format!("ja far\n{movs}far:\nexit");
    asm_err(&text, 1, 0, "(use `ja32`)");
    // Backward, named at the jump's own line and pc.
    let text = format!("top:\nmov %r0, 0\n{movs}ja top\nexit");
    asm_err(&text, N + 3, N + 1, "offset -40002 to `top` does not fit in 16 bits");
    // `ja32` and `call local` have 32 bits.
    assert_ok(&format!("ja32 far\n{movs}far:\nexit"));
    // A relative offset is range-checked too.
    asm_err("ja +32768\nexit", 1, 0, "offset 32768 does not fit in 16 bits");
    asm_err("jne %r0, 0, -32769\nexit", 1, 0, "offset -32769 does not fit in 16 bits");
    asm_err("ja32 +2147483648\nexit", 1, 0, "offset 2147483648 does not fit in 32 bits");
}

#[test]
fn asm_exit_label_without_exit() {
    asm_err("mov %r0, 0\nja exit\nmov %r0, 1", 2, 1, "no `exit` instruction");
    // With an exit anywhere, `exit` names the first one.
    let slots = assemble("ja exit\nmov %r0, 1\nexit\nexit").unwrap();
    assert_eq!(slots[0].off, 1);
}

/// Relative offsets are parsed as wide integers; one that fits in no 64-bit integer must be
/// refused, not wrapped around.
#[test]
fn asm_huge_relative_offset_is_refused() {
    // 2^64 and 2^64 + 1: wrapping to i64 would give offsets 0 and 1.
    asm_err("ja +18446744073709551616\nexit", 1, 0, "does not fit");
    asm_err("ja +18446744073709551617\nexit\nexit", 1, 0, "does not fit");
    asm_err("call local -18446744073709551615\nexit", 1, 0, "does not fit");
}

/// `-0x-8…` (a second sign after `0x`, then 2^127) parses to `i128::MIN`, which must not be
/// negated: an error, not an overflow panic.
#[test]
fn asm_negating_i128_min_does_not_panic() {
    asm_err("mov %r0, -0x-80000000000000000000000000000000\nexit", 1, 0, "");
    asm_err("ldxw %r0, [%r1-0x-80000000000000000000000000000000]", 1, 0, "");
}

/// Numbers are "decimal or `0x` hexadecimal, with an optional sign": a sign after `0x` is not
/// part of that syntax.
#[test]
fn asm_sign_after_hex_prefix_is_refused() {
    asm_err("mov %r0, 0x-5\nexit", 1, 0, "expected a number");
    asm_err("mov %r0, 0x+5\nexit", 1, 0, "expected a number");
}

// ---------------------------------------------------------------------------------------------
// Slots that do not decode
// ---------------------------------------------------------------------------------------------

#[test]
fn unknown_opcodes() {
    for opcode in [
        0xff, // ALU64 with operation 0xf0
        0x8e, // JMP32 | CALL | X
        0x8c, // ALU | NEG | X
        0xdf, // ALU64 | END | X
        0x0d, // JMP | JA | X
        0x9d, // JMP | EXIT | X
        0x96, // JMP32 | EXIT
        0x86, // JMP32 | CALL
        0xe5, // JMP with operation 0xe0
        0x21, // LDX in ABS mode
        0x99, // LDX | MEMSX | DW: no signed 64-bit load
        0xc2, // ST | ATOMIC
        0x42, // ST | IND
        0xd3, // STX | ATOMIC | B
        0xcb, // STX | ATOMIC | H
        0x83, // STX | MEMSX
        0x08, // LD | X, neither lddw nor ABS/IND
    ] {
        decode_err(
            &at_pc2(Insn::new(opcode, 0, 0, 0, 0)),
            DecodeError::UnknownOpcode { pc: 2, opcode },
            2,
        );
    }
}

#[test]
fn registers_above_10() {
    let cases = [
        (Insn::new(op::ALU64 | op::MOV | op::K, 11, 0, 0, 1), "dst", 11),
        (Insn::new(op::ALU64 | op::MOV | op::X, 0, 15, 0, 0), "src", 15),
        (Insn::new(op::ALU | op::NEG, 12, 0, 0, 0), "dst", 12),
        (Insn::new(op::LDX | op::MEM | op::W, 0, 11, 0, 0), "src", 11),
        (Insn::new(op::STX | op::MEM | op::DW, 13, 1, 0, 0), "dst", 13),
        (Insn::new(op::JMP | op::JEQ | op::X, 1, 14, 0, 0), "src", 14),
        (Insn::new(op::JMP | op::CALL | op::X, 11, 0, 0, 0), "dst", 11),
        (Insn::new(op::LDDW, 15, 0, 0, 0), "dst", 15),
    ];
    for (bad, field, value) in cases {
        let mut slots = at_pc2(bad);
        if bad.opcode == op::LDDW {
            slots.insert(3, Insn::default());
        }
        decode_err(&slots, DecodeError::InvalidRegister { pc: 2, field, value }, 2);
    }
}

#[test]
fn reserved_fields_nonzero() {
    let cases = [
        // `mov r0, 1` with src=3
        (Insn::new(op::ALU64 | op::MOV | op::K, 0, 3, 0, 1), "src", 3),
        // `exit` with imm=1
        (Insn::new(op::EXIT_OP, 0, 0, 0, 1), "imm", 1),
        (Insn::new(op::EXIT_OP, 2, 0, 0, 0), "dst", 2),
        (Insn::new(op::ALU64 | op::MOV | op::X, 0, 1, 0, 7), "imm", 7),
        (Insn::new(op::ALU64 | op::ADD | op::K, 0, 0, 2, 0), "off", 2),
        // movsx with an immediate source is not an instruction
        (Insn::new(op::ALU64 | op::MOV | op::K, 0, 0, 8, 0), "off", 8),
        // movsx32 from 32 bits
        (Insn::new(op::ALU | op::MOV | op::X, 0, 1, 32, 0), "off", 32),
        (Insn::new(op::ALU | op::NEG, 0, 0, 0, -1), "imm", -1),
        (Insn::new(op::ALU | op::END, 0, 1, 0, 16), "src", 1),
        (Insn::new(op::JMP | op::JA, 1, 0, 0, 0), "dst", 1),
        (Insn::new(op::JMP | op::JA, 0, 0, 0, 5), "imm", 5),
        (Insn::new(op::JMP32 | op::JA, 0, 0, 5, 0), "off", 5),
        (Insn::new(op::CALL_OP, 0, 0, 1, 1), "off", 1),
        (Insn::new(op::CALL_OP, 3, 0, 0, 1), "dst", 3),
        (Insn::new(op::CALL_OP, 0, 3, 0, 1), "src", 3),
        (Insn::new(op::JMP | op::CALL | op::X, 1, 0, 0, 1), "imm", 1),
        (Insn::new(op::JMP | op::JEQ | op::K, 0, 4, 0, 0), "src", 4),
        (Insn::new(op::LDX | op::MEM | op::W, 0, 1, 0, 9), "imm", 9),
        (Insn::new(op::ST | op::MEM | op::W, 1, 2, 0, 9), "src", 2),
        (Insn::new(op::STX | op::MEM | op::W, 1, 2, 0, 9), "imm", 9),
        (Insn::new(op::LDDW, 0, 0, 4, 0), "off", 4),
    ];
    for (bad, field, value) in cases {
        let mut slots = at_pc2(bad);
        if bad.opcode == op::LDDW {
            slots.insert(3, Insn::default());
        }
        decode_err(&slots, DecodeError::ReservedField { pc: 2, field, value }, 2);
    }
}

#[test]
fn lddw_map_second_half_imm_names_second_slot() {
    let slots = vec![
        MOV0,
        Insn::new(op::LDDW, 1, op::PSEUDO_MAP_IDX, 0, 0),
        Insn::new(0, 0, 0, 0, 7),
        EXIT,
    ];
    decode_err(&slots, DecodeError::ReservedField { pc: 2, field: "imm", value: 7 }, 2);
}

#[test]
fn endian_width_8() {
    for opcode in [op::ALU | op::END | op::K, op::ALU | op::END | op::X, op::ALU64 | op::END] {
        for imm in [8, 0, 128, -16] {
            decode_err(
                &at_pc2(Insn::new(opcode, 0, 0, 0, imm)),
                DecodeError::InvalidEndianWidth { pc: 2, imm },
                2,
            );
        }
    }
}

#[test]
fn bad_atomic_imm() {
    for opcode in [op::STX | op::ATOMIC | op::W, op::STX | op::ATOMIC | op::DW] {
        // SUB is no atomic operation; xchg and cmpxchg without FETCH; unknown high bits.
        for imm in [0x10, 0x11, 0xe0, 0xf0, 0x100, 0x02, -1] {
            decode_err(
                &at_pc2(Insn::new(opcode, 1, 2, 0, imm)),
                DecodeError::InvalidAtomicOp { pc: 2, imm },
                2,
            );
        }
    }
}

#[test]
fn legacy_packet_loads_unsupported() {
    for opcode in [op::LD | op::ABS | op::W, 0x20, 0x28, 0x30, op::LD | op::IND | op::B] {
        let slots = at_pc2(Insn::new(opcode, 0, 0, 0, 0));
        let err = decode(&slots).unwrap_err();
        match &err {
            DecodeError::Unsupported { pc: 2, what } => assert!(what.contains("LD_ABS")),
            other => panic!("{opcode:#x}: {other:?}"),
        }
        decode_err(&slots, err, 2);
    }
}

#[test]
fn kfunc_call_unsupported() {
    let slots = at_pc2(Insn::new(op::CALL_OP, 0, op::CALL_KFUNC, 0, 1));
    let err = decode(&slots).unwrap_err();
    match &err {
        DecodeError::Unsupported { pc: 2, what } => assert!(what.contains("kfunc")),
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("not supported"));
    decode_err(&slots, err, 2);
}

#[test]
fn lddw_in_last_slot() {
    let slots = vec![MOV0, MOV0, Insn::new(op::LDDW, 0, 0, 0, 1)];
    decode_err(&slots, DecodeError::LddwMissingSecondHalf { pc: 2 }, 2);
    decode_err(&slots[2..], DecodeError::LddwMissingSecondHalf { pc: 0 }, 0);
}

#[test]
fn lddw_followed_by_an_instruction() {
    let lddw = Insn::new(op::LDDW, 0, 0, 0, 1);
    for second in [
        EXIT,
        MOV0,
        Insn::new(0, 1, 0, 0, 0),
        Insn::new(0, 0, 1, 0, 0),
        Insn::new(0, 0, 0, 1, 0),
        lddw,
    ] {
        decode_err(
            &[MOV0, MOV0, lddw, second, EXIT],
            DecodeError::LddwMissingSecondHalf { pc: 2 },
            2,
        );
    }
}

#[test]
fn lddw_unsupported_source() {
    // 4 is a function reference, 5 a map index and 6 a place in a map's value; the others are
    // Linux's kernel objects (by file descriptor).
    for src in [1, 2, 3, 7, 15] {
        let slots = [MOV0, MOV0, Insn::new(op::LDDW, 0, src, 0, 1), Insn::default(), EXIT];
        decode_err(&slots, DecodeError::UnsupportedLddwSource { pc: 2, src }, 2);
    }
}

#[test]
fn bytes_not_a_multiple_of_8() {
    for len in [1usize, 7, 9, 12, 15, 4097] {
        let bytes = vec![0u8; len];
        let expected = DecodeError::TruncatedSlot { len };
        assert_eq!(slots_from_bytes(&bytes), Err(expected.clone()));
        assert_eq!(
            Program::from_bytes(&bytes, vec![], user()).map(|_| ()),
            Err(ProgramError::Decode(expected.clone()))
        );
        assert!(expected.to_string().contains(&format!("{len} bytes")));
    }
}

// ---------------------------------------------------------------------------------------------
// Programs that decode but are not well formed
// ---------------------------------------------------------------------------------------------

#[test]
fn empty_program() {
    program_err(vec![], ProgramError::Empty, None);
    assert_eq!(Program::from_bytes(&[], vec![], user()).map(|_| ()), Err(ProgramError::Empty));
    assert_eq!(assemble("# nothing\n\n").unwrap(), vec![]);
}

#[test]
fn program_too_large() {
    let max = Program::MAX_INSNS;
    let mut slots = vec![MOV0; max];
    *slots.last_mut().unwrap() = EXIT;
    assert!(Program::new(slots.clone(), vec![], user()).is_ok(), "exactly MAX_INSNS is fine");
    slots.insert(0, MOV0);
    let err = Program::new(slots, vec![], user()).unwrap_err();
    assert_eq!(err, ProgramError::TooLarge { len: max + 1, max });
    assert!(err.to_string().contains(&(max + 1).to_string()));
}

#[test]
fn jump_forward_past_end() {
    asm_program_err(
        "mov %r0, 0\nja +5\nexit",
        ProgramError::JumpOutOfRange { pc: 1, target: 7, len: 3 },
        1,
    );
    // One past the last slot is outside too.
    asm_program_err(
        "jeq %r0, 0, +1\nexit",
        ProgramError::JumpOutOfRange { pc: 0, target: 2, len: 2 },
        0,
    );
    asm_program_err(
        "ja32 +2147483647\nexit",
        ProgramError::JumpOutOfRange { pc: 0, target: 1 << 31, len: 2 },
        0,
    );
}

#[test]
fn jump_backward_before_0() {
    asm_program_err(
        "mov %r0, 0\nja -3\nexit",
        ProgramError::JumpOutOfRange { pc: 1, target: -1, len: 3 },
        1,
    );
    asm_program_err(
        "mov %r0, 0\njsgt32 %r0, -1, -32768\nexit",
        ProgramError::JumpOutOfRange { pc: 1, target: 2 - 32768, len: 3 },
        1,
    );
}

#[test]
fn jump_into_middle_of_lddw() {
    asm_program_err("ja +1\nlddw %r0, 1\nexit", ProgramError::JumpIntoLddw { pc: 0, target: 2 }, 0);
    asm_program_err(
        "lddw %r0, 1\nmov %r1, 0\njne %r1, 0, -3\nexit",
        ProgramError::JumpIntoLddw { pc: 3, target: 1 },
        3,
    );
}

#[test]
fn function_falls_off_end() {
    asm_program_err("mov %r0, 0", ProgramError::FallsOffEnd { pc: 0, function: 0 }, 0);
    asm_program_err("mov %r0, 0\nlddw %r0, 1", ProgramError::FallsOffEnd { pc: 1, function: 0 }, 1);
    // A conditional branch does not end a function.
    asm_program_err(
        "mov %r0, 0\njeq %r0, 0, -2",
        ProgramError::FallsOffEnd { pc: 1, function: 0 },
        1,
    );
    // The main function running into a local function.
    asm_program_err(
        "call local f\nmov %r0, 0\nf:\nexit",
        ProgramError::FallsOffEnd { pc: 1, function: 0 },
        1,
    );
    // A local function running past the end of the program.
    asm_program_err(
        "call local f\nexit\nf:\nmov %r0, 1",
        ProgramError::FallsOffEnd { pc: 2, function: 2 },
        2,
    );
}

#[test]
fn write_to_r10() {
    for line in [
        "mov %r10, 1",
        "add32 %r10, %r1",
        "neg %r10",
        "be16 %r10",
        "lddw %r10, 5",
        "ldxdw %r10, [%r1]",
        "ldxsb %r10, [%r1+1]",
        "movsx3264 %r10, %r1",
        "lock fetch add [%r1], %r10",
        "lock xchg32 [%r1], %r10",
    ] {
        asm_program_err(
            &format!("mov %r0, 0\n{line}\nexit"),
            ProgramError::WritesFramePointer { pc: 1 },
            1,
        );
    }
    // Reading r10, storing through it, and atomics without fetch are fine.
    assert_ok(
        "mov %r1, %r10\nstxdw [%r10-8], %r1\nlock add [%r10-8], %r1\nldxdw %r0, [%r10-8]\nexit",
    );
}

#[test]
fn recursion_via_call_local() {
    // Direct.
    asm_program_err(
        "call local f\nexit\nf:\ncall local f\nexit",
        ProgramError::Recursion { pc: 2, function: 2 },
        2,
    );
    // The main function calling itself.
    asm_program_err(
        "mov %r0, 0\ncall local -2\nexit",
        ProgramError::Recursion { pc: 1, function: 0 },
        1,
    );
    // Mutual: main -> f -> g -> f.
    asm_program_err(
        "call local f\nexit\nf:\ncall local g\nexit\ng:\ncall local f\nexit",
        ProgramError::Recursion { pc: 4, function: 2 },
        4,
    );
    // A cycle that main never reaches is still refused.
    asm_program_err(
        "exit\nf:\ncall local g\nexit\ng:\ncall local f\nexit\n",
        ProgramError::Recursion { pc: 3, function: 1 },
        3,
    );
}

/// `n` functions in a chain: main calls f1, which calls f2, …
fn call_chain(n: usize) -> String {
    let mut text = String::new();
    for i in 0..n {
        if i > 0 {
            text += &format!("f{i}:\n");
        }
        if i + 1 < n {
            text += &format!("call local f{}\n", i + 1);
        }
        text += "exit\n";
    }
    text
}

#[test]
fn call_depth_over_limit() {
    let max = Program::MAX_CALL_DEPTH;
    assert_eq!(max, 8);
    assert_ok(&call_chain(max));
    // A chain of 9 functions: the call in the 8th (f7, at pc 14) makes the 9th frame.
    asm_program_err(&call_chain(max + 1), ProgramError::CallTooDeep { pc: 14, depth: 9, max }, 14);
    // The same depth reached through a function whose depth was already computed: main calls
    // a chain of 7 (`a` … ) first, which is fine (8 frames), then `b`, which calls `a` (9).
    let mut text = String::from("call local a1\ncall local b\nexit\nb:\ncall local a1\nexit\n");
    for i in 1..=7 {
        text += &format!("a{i}:\n");
        if i < 7 {
            text += &format!("call local a{}\n", i + 1);
        }
        text += "exit\n";
    }
    asm_program_err(&text, ProgramError::CallTooDeep { pc: 3, depth: 9, max }, 3);
}

#[test]
fn unknown_map() {
    asm_program_err(
        "mov %r0, 0\nlddw %r1, map[3]\nexit",
        ProgramError::UnknownMap { pc: 1, index: 3, len: 0 },
        1,
    );
    asm_program_err(
        "lddw %r1, map[0]\nexit",
        ProgramError::UnknownMap { pc: 0, index: 0, len: 0 },
        0,
    );
    asm_program_err(
        "lddw %r1, map[4294967295]\nexit",
        ProgramError::UnknownMap { pc: 0, index: u32::MAX, len: 0 },
        0,
    );
    // With a table of two maps, entries 0 and 1 exist and 2 does not.
    let map = |name: &str| MapDef {
        name: name.into(),
        kind: MapKind::Array,
        key_size: 4,
        value_size: 8,
        capacity: 1,
    };
    let maps = vec![map("a"), map("b")];
    let ok = assemble("lddw %r1, map[0]\nlddw %r2, map[1]\nexit").unwrap();
    assert!(Program::new(ok, maps.clone(), user()).is_ok());
    let bad = assemble("lddw %r1, map[1]\nlddw %r2, map[2]\nexit").unwrap();
    let err = Program::new(bad, maps, user()).unwrap_err();
    assert_eq!(err, ProgramError::UnknownMap { pc: 2, index: 2, len: 2 });
    assert_names_pc(&err.to_string(), 2);
}

#[test]
fn local_call_out_of_range() {
    asm_program_err(
        "mov %r0, 0\ncall local +5\nexit",
        ProgramError::CallOutOfRange { pc: 1, target: 7 },
        1,
    );
    asm_program_err(
        "mov %r0, 0\ncall local -3\nexit",
        ProgramError::CallOutOfRange { pc: 1, target: -1 },
        1,
    );
    asm_program_err(
        "call local -2147483648\nexit",
        ProgramError::CallOutOfRange { pc: 0, target: 1 - (1 << 31) },
        0,
    );
    // Into the second half of lddw: not an instruction.
    asm_program_err(
        "call local +1\nlddw %r0, 1\nexit",
        ProgramError::CallOutOfRange { pc: 0, target: 2 },
        0,
    );
}

#[test]
fn function_reference_out_of_range_or_recursive() {
    // `lddw rX, func f` names a function as a call does: inside the program, at an
    // instruction.
    asm_program_err(
        "lddw %r2, func +5\nmov %r0, 0\nexit",
        ProgramError::CallOutOfRange { pc: 0, target: 6 },
        0,
    );
    asm_program_err(
        "mov %r0, 0\nlddw %r2, func +3\nexit\nlddw %r0, 1\nexit",
        ProgramError::CallOutOfRange { pc: 1, target: 5 },
        1,
    );
    // A function that names itself, for bpf_loop to call back, recurses.
    asm_program_err(
        "call local f\nexit\nf:\nlddw %r2, func f\nmov %r0, 0\nexit",
        ProgramError::Recursion { pc: 2, function: 2 },
        2,
    );
}

#[test]
fn jump_between_functions() {
    asm_program_err(
        "call local f\nja inside\nexit\nf:\nmov %r0, 1\ninside:\nexit",
        ProgramError::JumpAcrossFunctions { pc: 1, target: 4, function: 0 },
        1,
    );
    // Backward, from a local function into main.
    asm_program_err(
        "back:\ncall local f\nexit\nf:\njeq %r1, 0, back\nexit",
        ProgramError::JumpAcrossFunctions { pc: 2, target: 0, function: 2 },
        2,
    );
    // Jumping to a function's first instruction is leaving the function too.
    asm_program_err(
        "call local f\nja f\nf:\nexit",
        ProgramError::JumpAcrossFunctions { pc: 1, target: 2, function: 0 },
        1,
    );
}

/// Every malformed slot sequence of this file fed to `Program::new` together: each is an
/// error, none panics, and every error naming an instruction names one inside the input.
#[test]
fn program_new_never_panics_on_malformed_slots() {
    let mut inputs: Vec<Vec<Insn>> = vec![
        vec![],
        vec![MOV0],
        vec![Insn::new(op::LDDW, 0, 0, 0, 0)],
        vec![Insn::new(op::LDDW, 0, 1, 0, 0), Insn::default()],
        vec![Insn::new(op::JMP | op::JA, 0, 0, -1, 0)],
        vec![Insn::new(op::JMP | op::JA, 0, 0, i16::MIN, 0)],
        vec![Insn::new(op::JMP32 | op::JA, 0, 0, 0, i32::MAX)],
        vec![Insn::new(op::JMP32 | op::JA, 0, 0, 0, i32::MIN)],
        vec![Insn::new(op::CALL_OP, 0, 1, 0, i32::MAX), EXIT],
        vec![Insn::new(op::CALL_OP, 0, 1, 0, i32::MIN), EXIT],
        vec![Insn::new(op::CALL_OP, 0, 1, 0, -1), EXIT],
        vec![Insn::new(op::CALL_OP, 0, 1, 0, -2), EXIT],
    ];
    for opcode in 0..=255u8 {
        for (dst, src) in [(0, 0), (11, 0), (0, 15), (15, 15)] {
            for (off, imm) in [(0, 0), (1, 1), (-1, -1), (i16::MAX, i32::MIN)] {
                inputs.push(vec![Insn::new(opcode, dst, src, off, imm)]);
            }
        }
    }
    for slots in inputs {
        let len = slots.len();
        let err = match Program::new(slots.clone(), vec![], user()) {
            Ok(p) => {
                // The only well-formed inputs here: `exit`, and `ja -1` (a loop on itself).
                let ja_self = Insn::new(op::JMP | op::JA, 0, 0, -1, 0);
                assert!(p.insns() == [EXIT] || p.insns() == [ja_self], "{slots:?} accepted");
                continue;
            }
            Err(e) => e,
        };
        let shown = err.to_string();
        if let Some(pc) = err.pc() {
            assert!(pc < len.max(1), "{err:?} names pc {pc} of {len} slots");
            assert_names_pc(&shown, pc);
        }
    }
}
