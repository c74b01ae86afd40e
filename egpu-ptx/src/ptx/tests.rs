//! The reader's tests: exact round trips, the structure of real modules, typed errors with their
//! lines, and mutated modules that must never make it panic.

use super::*;

/// nvcc 13.0's PTX for tests/kernels/*.cu, and two modules written by hand.
const SAXPY: &str = include_str!("../../../tests/ptx/saxpy.ptx");
const VECTORS: &str = include_str!("../../../tests/ptx/vectors.ptx");
const REDUCE: &str = include_str!("../../../tests/ptx/reduce.ptx");
const LOCAL_ARRAY: &str = include_str!("../../../tests/ptx/local_array.ptx");
const TRITON_STYLE: &str = include_str!("../../../tests/ptx/triton_style.ptx");
const ODD_LAYOUT: &str = include_str!("../../../tests/ptx/odd_layout.ptx");

/// ODD_LAYOUT with UTF-8 in comments and strings (which ptxas refuses, so not in the file).
fn utf8_module() -> String {
    ODD_LAYOUT
        .replacen("// Written by hand", "// Écrit à la main — 漢字 🚀\n// Written by hand", 1)
        .replacen(".address_size 64", ".address_size 64 // naïve\n.file 2 \"ünï/cödé 🚀.cu\"", 1)
        .replacen("{ // a nested block", "{ /* ∀x ∈ ℕ */ // a nested block", 1)
        .replacen("$L1:   /* between", "$L1:   /* ½ between", 1)
}

fn fixtures() -> Vec<(&'static str, String)> {
    vec![
        ("saxpy.ptx", SAXPY.to_owned()),
        ("vectors.ptx", VECTORS.to_owned()),
        ("reduce.ptx", REDUCE.to_owned()),
        ("local_array.ptx", LOCAL_ARRAY.to_owned()),
        ("triton_style.ptx", TRITON_STYLE.to_owned()),
        ("odd_layout.ptx", ODD_LAYOUT.to_owned()),
        ("odd_layout.ptx with UTF-8", utf8_module()),
    ]
}

fn parse(text: &str) -> PtxModule {
    PtxModule::parse(text).unwrap_or_else(|e| panic!("{e}"))
}

/// Checks what every successful parse promises: the pieces cover the text exactly, in order,
/// none empty, each on the line it says; every function has a header followed (after trivia) by
/// a body that opens with `{`, closes with its matching `}`, and nests properly.
fn check_invariants(m: &PtxModule, text: &str) -> Result<(), String> {
    if m.text() != text {
        return Err("the module's text is not the input".into());
    }
    let mut at = 0;
    let mut line = 1;
    let mut joined = String::new();
    for (i, p) in m.pieces().iter().enumerate() {
        if p.range.start != at || p.range.end <= p.range.start {
            return Err(format!("piece {i} {p:?} does not follow at {at}"));
        }
        let Some(piece) = text.get(p.range.clone()) else {
            return Err(format!("piece {i} {p:?} is not on character boundaries"));
        };
        if p.line != line {
            return Err(format!("piece {i} {p:?} says line {}, starts on line {line}", p.line));
        }
        if m.piece_text(i) != piece {
            return Err(format!("piece_text({i}) is not the piece's text"));
        }
        joined.push_str(piece);
        line += piece.matches('\n').count();
        at = p.range.end;
    }
    if at != text.len() || joined != text {
        return Err(format!("the pieces end at {at} of {}", text.len()));
    }
    let mut previous_end = 0;
    for f in m.functions() {
        let pieces = m.pieces();
        let (open, close) = (f.body.start, f.body.end.wrapping_sub(1));
        if !(f.header < open && open < f.body.end && f.body.end <= pieces.len()) {
            return Err(format!("{f:?}: ranges out of order"));
        }
        if f.header < previous_end {
            return Err(format!("{f:?} overlaps the function before"));
        }
        previous_end = f.body.end;
        if pieces[f.header].kind != PieceKind::Header {
            return Err(format!("{f:?}: its header is {:?}", pieces[f.header]));
        }
        if pieces[f.header + 1..open].iter().any(|p| p.kind != PieceKind::Trivia) {
            return Err(format!("{f:?}: more than trivia between header and body"));
        }
        if pieces[open].kind != PieceKind::Open || pieces[close].kind != PieceKind::Close {
            return Err(format!("{f:?}: the body is not braced"));
        }
        let mut depth = 0usize;
        for (j, p) in pieces[open..=close].iter().enumerate() {
            match p.kind {
                PieceKind::Open => depth += 1,
                PieceKind::Close => {
                    depth -= 1;
                    if depth == 0 && open + j != close {
                        return Err(format!("{f:?}: the body closes early at piece {}", open + j));
                    }
                }
                PieceKind::Header => return Err(format!("{f:?}: a header in the body")),
                _ => {}
            }
        }
        if depth != 0 {
            return Err(format!("{f:?}: the body does not balance"));
        }
        for (i, ins) in m.instructions(f) {
            if !f.body.contains(&i) || ins.opcode.is_empty() || ins.line != pieces[i].line {
                return Err(format!("{f:?}: instruction {ins:?} at piece {i}"));
            }
        }
    }
    Ok(())
}

/// The instructions of function `name` whose opcode is `opcode`.
fn find<'m>(m: &'m PtxModule, name: &str, opcode: &str) -> Vec<PtxInstruction<'m>> {
    let f = m.function(name).unwrap_or_else(|| panic!("no function {name}"));
    m.instructions(f).into_iter().map(|(_, i)| i).filter(|i| i.opcode == opcode).collect()
}

/// The (only) instruction of function `name` whose opcode is `opcode`.
fn one<'m>(m: &'m PtxModule, name: &str, opcode: &str) -> PtxInstruction<'m> {
    let mut found = find(m, name, opcode);
    assert_eq!(found.len(), 1, "{name}: {opcode}: {found:?}");
    found.remove(0)
}

/// The texts of the statements of `m` (outside and inside functions) that start with `prefix`.
fn statements<'m>(m: &'m PtxModule, prefix: &str) -> Vec<&'m str> {
    (0..m.pieces().len())
        .filter(|&i| m.pieces()[i].kind == PieceKind::Statement)
        .map(|i| m.piece_text(i))
        .filter(|s| s.starts_with(prefix))
        .collect()
}

/// The line (from 1) of the first occurrence of `needle` in `text`.
fn line_of(text: &str, needle: &str) -> usize {
    let at = text.find(needle).unwrap_or_else(|| panic!("{needle:?} not in the text"));
    text[..at].matches('\n').count() + 1
}

// ----- round trips ------------------------------------------------------------------------------

#[test]
fn pieces_cover_every_fixture_exactly() {
    for (name, text) in fixtures() {
        let m = parse(&text);
        check_invariants(&m, &text).unwrap_or_else(|e| panic!("{name}: {e}"));
        let joined: String = (0..m.pieces().len()).map(|i| m.piece_text(i)).collect();
        assert_eq!(joined, text, "{name}");
    }
}

#[test]
fn the_empty_module_and_trivia_alone_are_modules() {
    for text in ["", "\n", "// nothing\n", "/* nothing */", " \t\r\n"] {
        let m = parse(text);
        check_invariants(&m, text).unwrap();
        assert!(m.functions().is_empty());
        assert!(m.pieces().iter().all(|p| p.kind == PieceKind::Trivia), "{text:?}");
    }
}

// ----- structure --------------------------------------------------------------------------------

#[test]
fn module_directives() {
    for (name, text) in [("saxpy", SAXPY), ("vectors", VECTORS), ("reduce", REDUCE)] {
        let m = parse(text);
        assert_eq!(m.directive(".version"), Some("9.0"), "{name}");
        assert_eq!(m.directive(".target"), Some("sm_90"), "{name}");
        assert_eq!(m.directive(".address_size"), Some("64"), "{name}");
        assert_eq!(m.directive(".section"), None, "{name}");
        // Line directives end with their line: the next directive is a statement of its own.
        assert_eq!(statements(&m, ".version"), [".version 9.0"], "{name}");
    }
    let m = parse(TRITON_STYLE);
    assert_eq!(m.directive(".version"), Some("8.7"));
    assert_eq!(m.directive(".target"), Some("sm_90"));
    let m = parse(ODD_LAYOUT);
    // The comment after a line directive is trivia, not part of it.
    assert_eq!(statements(&m, ".version"), [".version 9.0"]);
    assert_eq!(statements(&m, ".target"), [".target sm_90"]);
    assert_eq!(m.directive(".address_size"), Some("64"));
}

#[test]
fn reduce_has_a_device_function_and_a_kernel() {
    let m = parse(REDUCE);
    let names: Vec<_> = m.functions().iter().map(|f| (f.name.as_str(), f.kind)).collect();
    assert_eq!(names, [("_Z3mixj", FunctionKind::Func), ("reduce", FunctionKind::Entry)]);
    assert_eq!(m.entries().map(|f| f.name.as_str()).collect::<Vec<_>>(), ["reduce"]);
    let mix = m.function("_Z3mixj").unwrap();
    assert!(m.piece_text(mix.header).starts_with(".func  (.param .b32 func_retval0) _Z3mixj("));
    assert!(m.piece_text(mix.header).ends_with(')'), "the header ends at its last `)`");

    let reduce = m.function("reduce").unwrap();
    let ins = m.instructions(reduce);
    let loads: Vec<_> = ins.iter().filter(|(_, i)| i.is_global_load()).collect();
    assert_eq!(loads.len(), 1, "{loads:?}");
    assert_eq!(loads[0].1.opcode, "ld.global.u32");
    assert_eq!(loads[0].1.operands, ["%r13", "[%rd5]"]);
    assert_eq!(loads[0].1.line, line_of(REDUCE, "ld.global.u32"));
    let atom = one(&m, "reduce", "atom.global.add.u32");
    assert!(!atom.is_global_load() && !atom.is_global_store() && !atom.is_generic_access());
    assert_eq!(atom.operands, ["%r22", "[%rd6]", "%r21"]);
    assert_eq!(ins.iter().filter(|(_, i)| i.base() == "ld" && i.has("shared")).count(), 3);
    assert!(ins.iter().all(|(_, i)| !i.is_generic_access()), "reduce has no generic access");

    // The call sits in a nested block, with its operands spread over lines.
    let call = one(&m, "reduce", "call.uni");
    assert_eq!(call.operands, ["(retval0)", "_Z3mixj", "(\n\tparam0\n\t)"]);
    let body = &m.pieces()[reduce.body.clone()];
    assert_eq!(body.iter().filter(|p| p.kind == PieceKind::Open).count(), 2);
    assert_eq!(body.iter().filter(|p| p.kind == PieceKind::Close).count(), 2);
    let labels: Vec<_> = reduce
        .body
        .clone()
        .filter(|&i| m.pieces()[i].kind == PieceKind::Label)
        .map(|i| m.piece_text(i))
        .collect();
    assert_eq!(labels, ["$L__BB1_2:", "$L__BB1_3:", "$L__BB1_5:", "$L__BB1_6:", "$L__BB1_8:"]);

    // Returns, and guards.
    for f in m.functions() {
        assert_eq!(m.instructions(f).iter().filter(|(_, i)| i.is_return()).count(), 1, "{f:?}");
    }
    let branches = find(&m, "reduce", "bra");
    assert_eq!(branches.len(), 5);
    assert_eq!(branches[0].guard, Some(Guard { negated: false, predicate: "%p1".into() }));
    assert_eq!(branches[0].operands, ["$L__BB1_2"]);
    assert!(statements(&m, ".shared .align 4 .b8 _ZZ6reduceE4part[1024];").len() == 1);
}

#[test]
fn saxpy_loads_and_stores() {
    let m = parse(SAXPY);
    assert_eq!(m.functions().len(), 1);
    let f = &m.functions()[0];
    assert_eq!((f.name.as_str(), f.kind), ("saxpy", FunctionKind::Entry));
    let ins = m.instructions(f);
    let loads: Vec<_> =
        ins.iter().filter(|(_, i)| i.is_global_load()).map(|(_, i)| i.opcode).collect();
    assert_eq!(loads, ["ld.global.nc.f32", "ld.global.f32"]);
    let stores: Vec<_> =
        ins.iter().filter(|(_, i)| i.is_global_store()).map(|(_, i)| i.operands.clone()).collect();
    assert_eq!(stores, [vec!["[%rd7]", "%f4"]]);
    assert!(ins.iter().any(|(_, i)| i.opcode == "ret" && i.operands.is_empty()));
    let params = ins.iter().filter(|(_, i)| i.base() == "ld" && i.has("param")).count();
    assert_eq!(params, 4);
}

#[test]
fn vectors_have_braced_operands() {
    let m = parse(VECTORS);
    let load = one(&m, "scale4", "ld.global.nc.v4.f32");
    assert!(load.is_global_load() && load.has("nc") && load.has("v4"));
    assert_eq!(load.parts().collect::<Vec<_>>(), ["ld", "global", "nc", "v4", "f32"]);
    assert_eq!(load.operands, ["{%f2,%f3,%f4,%f5}", "[%rd3]"]);
    let store = one(&m, "scale4", "st.global.v4.f32");
    assert!(store.is_global_store());
    assert_eq!(store.operands, ["[%rd6]", "{%f9, %f8, %f7, %f6}"]);
    let f = m.function("scale4").unwrap();
    assert!(m.instructions(f).iter().any(|(_, i)| i.is_return()));
    // The early return is a guarded branch to the final `ret`.
    assert_eq!(one(&m, "scale4", "bra").guard.map(|g| g.predicate), Some("%p1".into()));
}

#[test]
fn local_memory_is_neither_global_nor_generic() {
    let m = parse(LOCAL_ARRAY);
    let f = m.function("local_array").unwrap();
    let ins = m.instructions(f);
    let local = ins.iter().filter(|(_, i)| i.has("local")).count();
    assert_eq!(local, 40);
    assert_eq!(ins.iter().filter(|(_, i)| i.is_global_load()).count(), 32);
    assert_eq!(ins.iter().filter(|(_, i)| i.base() == "ld" && i.has("const")).count(), 16);
    assert!(ins.iter().all(|(_, i)| !i.is_generic_access()));
    assert_eq!(statements(&m, ".const"), [".const .align 4 .b8 weights[64];"]);
    assert_eq!(statements(&m, ".local"), [".local .align 16 .b8 \t__local_depot0[128];"]);
}

#[test]
fn triton_style_sections_lines_and_async_copies() {
    let m = parse(TRITON_STYLE);
    assert_eq!(m.functions().len(), 1);
    let f = &m.functions()[0];
    assert_eq!((f.name.as_str(), f.kind), ("add_kernel", FunctionKind::Entry));
    assert!(m.piece_text(f.header).ends_with(".reqntid 128, 1, 1"), "{}", m.piece_text(f.header));

    // `.section` blocks are single statements, ending with their `}`.
    let sections = statements(&m, ".section");
    assert_eq!(sections.len(), 3);
    assert!(sections[0].starts_with(".section\t.debug_abbrev\n\t{\n.b8 1 "), "{}", sections[0]);
    assert!(sections.iter().all(|s| s.ends_with('}')), "{sections:?}");
    assert_eq!(sections[2], ".section\t.debug_macinfo\t{\t}");
    assert_eq!(
        statements(&m, ".file"),
        ["\t.file\t1 \"/home/someone/kernels/add_kernel.py\"".trim_start()]
    );
    // `.loc` ends before its comment.
    let locs = statements(&m, ".loc");
    assert_eq!(locs.len(), 11);
    assert_eq!(locs[0], ".loc\t1 12 0");
    let labels: Vec<_> = f
        .body
        .clone()
        .filter(|&i| m.pieces()[i].kind == PieceKind::Label)
        .map(|i| m.piece_text(i))
        .collect();
    assert_eq!(labels, ["$L__func_begin0:", "$L__tmp0:", "$L__tmp1:", "$L__func_end0:"]);
    // Dynamic shared memory is a declaration at module level.
    assert_eq!(statements(&m, ".extern"), [".extern .shared .align 16 .b8 global_smem[];"]);

    let load = one(&m, "add_kernel", "ld.global.v4.b32");
    assert_eq!(load.guard, Some(Guard { negated: false, predicate: "%p1".into() }));
    assert_eq!(load.operands, ["{ %r1, %r2, %r3, %r4 }", "[ %rd1 + 0 ]"]);
    assert!(load.is_global_load());
    let store = one(&m, "add_kernel", "st.global.v4.b32");
    assert_eq!(store.operands, ["[ %rd3 + 0 ]", "{ %r15, %r16, %r17, %r18 }"]);
    let copy = one(&m, "add_kernel", "cp.async.cg.shared.global");
    assert_eq!(copy.operands, ["[ %r5 + 0 ]", "[ %rd2 + 0 ]", "0x10", "%r6"]);
    assert!(!copy.is_global_load() && !copy.is_generic_access());
    assert!(one(&m, "add_kernel", "cp.async.commit_group").operands.is_empty());
    assert_eq!(one(&m, "add_kernel", "cp.async.wait_group").operands, ["0x0"]);
    assert!(one(&m, "add_kernel", "ret").is_return());
    let ins = m.instructions(f);
    assert_eq!(ins.iter().filter(|(_, i)| i.is_global_load()).count(), 1);
    assert_eq!(ins.iter().filter(|(_, i)| i.has("shared")).count(), 2);
}

#[test]
fn odd_layout_comments_strings_guards_and_blocks() {
    for text in [ODD_LAYOUT.to_owned(), utf8_module()] {
        let m = parse(&text);
        let kinds: Vec<_> = m.functions().iter().map(|f| (f.name.as_str(), f.kind)).collect();
        assert_eq!(kinds, [("odd_layout", FunctionKind::Entry), ("twice", FunctionKind::Func)]);
        // Declarations without body are statements, not functions.
        assert_eq!(
            statements(&m, ".extern"),
            [".extern .func (.param .b32 ext_ret) ext_helper (.param .b64 ext_a);"]
        );
        assert_eq!(statements(&m, ".func"), [".func (.param .b32 r) twice (.param .b32 x);"]);
        assert_eq!(
            statements(&m, ".global"),
            [".global .align 4 .b32 table[4] = {1, 2, /* three } */ 3, 4};"]
        );
        assert_eq!(
            statements(&m, ".file 1"),
            [".file 1 \"dir with spaces/odd;name{1}//not-a-comment.cu\""]
        );
        assert_eq!(statements(&m, ".pragma"), [".pragma \"nounroll\";"]);
        let header = m.piece_text(m.functions()[0].header);
        assert!(header.starts_with(".visible /* linkage */ .entry odd_layout("), "{header}");
        assert!(header.ends_with(".maxntid 256, 1, 1"), "{header}");

        let branches = find(&m, "odd_layout", "bra");
        let guards: Vec<_> = branches.iter().map(|b| b.guard.clone().unwrap()).collect();
        assert_eq!(
            guards,
            [
                Guard { negated: false, predicate: "%p1".into() },
                Guard { negated: true, predicate: "%p2".into() }
            ]
        );
        assert_eq!(branches[1].operands, ["$L1"]);
        // Two statements on one line.
        let (a, b) = (one(&m, "odd_layout", "setp.ge.u32"), one(&m, "odd_layout", "setp.eq.u32"));
        assert_eq!(a.line, b.line);
        // Comments around operands are trimmed; inside one, they stay.
        let adds = find(&m, "odd_layout", "add.u32");
        assert_eq!(adds.len(), 2);
        assert_eq!(adds[0].operands, ["%r3", "inner", "1"]);
        assert_eq!(adds[1].operands, ["%r4", "%r2", "%r3"]);
        assert_eq!(
            one(&m, "odd_layout", "st.global.u32").operands,
            ["[%rd4 /* base */ + 0]", "%r4"]
        );
        let call = one(&m, "odd_layout", "call.uni");
        assert_eq!(call.operands.len(), 3, "{call:?}");
        assert_eq!(call.operands[1], "twice");
        // The label, then the comment, then the instruction on the same line.
        let f = m.function("odd_layout").unwrap();
        let label = f.body.clone().find(|&i| m.piece_text(i) == "$L1:").unwrap();
        assert_eq!(m.pieces()[label + 1].kind, PieceKind::Trivia);
        assert!(m.piece_text(label + 1).contains("between a label and its instruction"));
        assert!(m.piece_text(label + 2).starts_with("add.u32 %r4, %r2, /* inside"));
        // A block inside a block inside the body.
        let mut depth = 0;
        let mut deepest = 0;
        for p in &m.pieces()[f.body.clone()] {
            match p.kind {
                PieceKind::Open => depth += 1,
                PieceKind::Close => depth -= 1,
                _ => {}
            }
            deepest = deepest.max(depth);
        }
        assert_eq!(deepest, 3);
        let moves = find(&m, "odd_layout", "mov.u32");
        assert_eq!(
            moves.iter().map(|i| i.operands.clone()).collect::<Vec<_>>(),
            [["%r2", "%tid.x"], ["inner", "%r3"]]
        );
        for f in m.functions() {
            assert!(m.instructions(f).iter().any(|(_, i)| i.is_return()), "{f:?}");
        }
    }
    let m = parse(&utf8_module());
    assert_eq!(statements(&m, ".file 2"), [".file 2 \"ünï/cödé 🚀.cu\""]);
}

#[test]
fn instructions_in_isolation() {
    let text = "\
.visible .entry k()
{
\t@!%p2 bra $L1;
\tld.global.nc.v2.u64 {%rd1, %rd2}, [%rd3+16];
\tst.shared::cta.u32 [%r1], %r2;
\tld.u32 %r3, [%rd4];
\tst.param::func.b32 [p], %r1;
\tmov.u32 %r4, \"not, an; operand\";
\texit;
$L1: ret;
}
";
    let m = parse(text);
    let f = &m.functions()[0];
    let ins: Vec<_> = m.instructions(f).into_iter().map(|(_, i)| i).collect();
    assert_eq!(ins.len(), 8);
    assert_eq!(ins[0].guard, Some(Guard { negated: true, predicate: "%p2".into() }));
    assert_eq!(ins[1].operands, ["{%rd1, %rd2}", "[%rd3+16]"]);
    assert!(ins[1].is_global_load() && ins[1].has("v2") && !ins[1].has("global.nc"));
    assert_eq!(ins[2].opcode, "st.shared::cta.u32");
    assert!(!ins[2].is_generic_access() && !ins[2].is_global_store());
    assert!(ins[3].is_generic_access() && !ins[3].is_global_load());
    assert!(!ins[4].is_generic_access());
    assert_eq!(ins[5].operands, ["%r4", "\"not, an; operand\""]);
    assert!(ins[6].is_return() && ins[7].is_return());
    assert_eq!(ins.iter().map(|i| i.line).collect::<Vec<_>>(), [3, 4, 5, 6, 7, 8, 9, 10]);
    assert_eq!(ins[5].base(), "mov");
}

// ----- errors -----------------------------------------------------------------------------------

#[test]
fn malformed_modules_are_typed_errors_with_their_line() {
    let saxpy_open = line_of(SAXPY, "{");
    let cases: Vec<(String, PtxError)> = vec![
        // An unterminated comment, in a function and at the end.
        (
            SAXPY.replacen("ret;", "/* ret;", 1),
            PtxError::UnterminatedComment { line: line_of(SAXPY, "ret;") },
        ),
        (format!("{REDUCE}/*"), PtxError::UnterminatedComment { line: 111 }),
        // An unterminated string: strings end with their line.
        (
            ODD_LAYOUT.replacen("\"nounroll\"", "\"nounroll", 1),
            PtxError::UnterminatedString { line: line_of(ODD_LAYOUT, ".pragma") },
        ),
        (format!("{SAXPY}.file 3 \"x"), PtxError::UnterminatedString { line: 61 }),
        // Braces that do not balance.
        (format!("{SAXPY}}}\n"), PtxError::UnopenedBrace { line: 61 }),
        (
            SAXPY[..SAXPY.rfind('}').unwrap()].to_owned(),
            PtxError::UnclosedBrace { line: saxpy_open },
        ),
        (
            REDUCE.replacen("} // callseq 0", "// callseq 0", 1),
            // The `}` of the body closes the call's block: the body's `{` is left open.
            PtxError::UnclosedBrace { line: line_of(REDUCE, "reduce_param_2\n)\n{") + 2 },
        ),
        // A function missing its `}`, with another function after it.
        (
            format!("{}\n{SAXPY}", &VECTORS[..VECTORS.rfind('}').unwrap()]),
            PtxError::UnclosedBrace { line: line_of(VECTORS, "{") },
        ),
        // A statement without `;`: at the end, and before the `}` of its block.
        (format!("{SAXPY}\tmov.u32 %r1, 0\n"), PtxError::UnterminatedStatement { line: 61 }),
        (
            SAXPY.replacen("ret;", "ret", 1),
            PtxError::UnterminatedStatement { line: line_of(SAXPY, "ret;") },
        ),
        (
            VECTORS.replacen("{%f9, %f8, %f7, %f6};", "{%f9, %f8, %f7, %f6;", 1),
            PtxError::UnclosedBrace { line: line_of(VECTORS, "{%f9") },
        ),
        // A header without body.
        (
            format!("{SAXPY}.visible .entry k(\n\t.param .u32 a\n)\n"),
            PtxError::MissingBody { line: 61 },
        ),
        (
            ".version 9.0\n.func f()\n// nothing follows".to_owned(),
            PtxError::MissingBody { line: 2 },
        ),
    ];
    for (text, expected) in cases {
        let got = PtxModule::parse(&text);
        assert_eq!(got.as_ref().err(), Some(&expected), "for:\n{text}");
        let message = expected.to_string();
        assert!(message.starts_with(&format!("line {}: ", line_of_error(&expected))), "{message}");
    }
}

fn line_of_error(e: &PtxError) -> usize {
    match *e {
        PtxError::UnterminatedComment { line }
        | PtxError::UnterminatedString { line }
        | PtxError::UnopenedBrace { line }
        | PtxError::UnclosedBrace { line }
        | PtxError::UnterminatedStatement { line }
        | PtxError::MissingBody { line } => line,
    }
}

// ----- robustness -------------------------------------------------------------------------------

// The tests' seeded generator (xorshift64*, as this file always used), so that every run mutates
// the same way.
use egpu_test_support::{Algorithm, Rng};

/// What the mutations insert: the reader's delimiters, directives that change how statements
/// end, and characters of 2, 3 and 4 bytes.
const TOKENS: [&str; 32] = [
    "{",
    "}",
    ";",
    "\"",
    "/",
    "*",
    "/*",
    "*/",
    "//",
    "\n",
    "(",
    ")",
    "[",
    "]",
    ":",
    "@",
    "@!",
    ",",
    "\\",
    ".entry ",
    ".func ",
    ".section ",
    ".loc 1 2 3",
    ".version",
    "$L1:",
    "é",
    "½",
    "漢",
    "🚀",
    "\u{a0}",
    "\r\n",
    "\0",
];

/// A random position in `s` at a character boundary.
fn boundary(s: &str, rng: &mut Rng) -> usize {
    let mut at = rng.below(s.len() + 1);
    while !s.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn mutate(text: &str, rng: &mut Rng) -> String {
    let mut s = text.to_owned();
    for _ in 0..1 + rng.below(4) {
        let a = boundary(&s, rng);
        let mut b = (a + 1 + rng.below(12)).min(s.len());
        while !s.is_char_boundary(b) {
            b += 1;
        }
        let token = TOKENS[rng.below(TOKENS.len())];
        match rng.below(10) {
            0..=2 => s.replace_range(a..b, ""),
            3..=6 => s.insert_str(a, token),
            7 | 8 => s.replace_range(a..b, token),
            _ => s.truncate(a),
        }
    }
    s
}

#[test]
fn mutated_modules_never_panic_and_keep_the_invariants() {
    let fixtures = fixtures();
    let mut rng = Rng::with_algorithm(Algorithm::XorShift64Star, 0x9e37_79b9_7f4a_7c15);
    let (mut ok, mut errors) = (0, 0);
    for case in 0..3000 {
        let (name, text) = &fixtures[case % fixtures.len()];
        let text = mutate(text, &mut rng);
        let result = std::panic::catch_unwind(|| PtxModule::parse(&text));
        let Ok(result) = result else {
            panic!("case {case} ({name}): the reader panicked on:\n{text}");
        };
        match result {
            Ok(m) => {
                ok += 1;
                if let Err(e) = check_invariants(&m, &text) {
                    panic!("case {case} ({name}): {e}, for:\n{text}");
                }
                let _ = (m.directive(".version"), m.directive(".target"));
                // Every statement read as an instruction, at module level too.
                let everything = Function {
                    kind: FunctionKind::Entry,
                    name: String::new(),
                    header: 0,
                    body: 0..m.pieces().len(),
                };
                for (i, ins) in m.instructions(&everything) {
                    let piece = m.piece_text(i);
                    let inside = |s: &str| {
                        piece.as_ptr() as usize <= s.as_ptr() as usize
                            && s.as_ptr() as usize + s.len()
                                <= piece.as_ptr() as usize + piece.len()
                    };
                    assert!(inside(ins.opcode), "case {case}: {ins:?}");
                    assert!(ins.operands.iter().all(|o| inside(o)), "case {case}: {ins:?}");
                }
            }
            Err(e) => {
                errors += 1;
                let lines = text.matches('\n').count() + 1;
                let line = line_of_error(&e);
                assert!((1..=lines).contains(&line), "case {case} ({name}): {e} of {lines}");
            }
        }
    }
    println!("{ok} mutated modules read, {errors} refused");
    // Both outcomes are exercised.
    assert!(ok > 300 && errors > 300, "{ok} read, {errors} refused");
}

#[test]
fn every_prefix_of_a_fixture_reads_or_fails_cleanly() {
    for (name, text) in fixtures() {
        for end in (0..=text.len()).filter(|&e| text.is_char_boundary(e)) {
            let prefix = &text[..end];
            match PtxModule::parse(prefix) {
                Ok(m) => {
                    check_invariants(&m, prefix).unwrap_or_else(|e| panic!("{name}[..{end}]: {e}"))
                }
                Err(e) => {
                    let lines = prefix.matches('\n').count() + 1;
                    assert!((1..=lines).contains(&line_of_error(&e)), "{name}[..{end}]: {e}");
                }
            }
        }
    }
}
