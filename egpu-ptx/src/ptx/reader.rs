//! The PTX reader: pieces, functions and instructions (see the module docs).
//!
//! The lexer works on bytes. Everything it looks for (whitespace, `;`, braces, quotes, comment
//! marks) is ASCII, and every piece boundary lies next to an ASCII byte it consumed or stopped
//! at, so every boundary is a character boundary of the text. Text is only ever sliced through
//! [`slice`], which returns `""` rather than panic should that reasoning ever be wrong.

use std::ops::Range;

use thiserror::Error;

/// Why a PTX module could not be read.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum PtxError {
    /// A `/*` comment without its `*/`.
    #[error("line {line}: a comment never ends")]
    UnterminatedComment {
        /// Where it starts.
        line: usize,
    },
    /// A string without its closing quote.
    #[error("line {line}: a string never ends")]
    UnterminatedString {
        /// Where it starts.
        line: usize,
    },
    /// A `}` without its `{`.
    #[error("line {line}: `}}` closes nothing")]
    UnopenedBrace {
        /// Where it is.
        line: usize,
    },
    /// A `{` without its `}`; also reported when a function header appears inside a block, whose
    /// `}` must then be missing.
    #[error("line {line}: `{{` is never closed")]
    UnclosedBrace {
        /// Where it is.
        line: usize,
    },
    /// A statement that no `;` ends: at the end of the text, or before the `}` of its block.
    #[error("line {line}: a statement has no `;`")]
    UnterminatedStatement {
        /// Where it starts.
        line: usize,
    },
    /// A function header (`.entry` or `.func`) that neither a body nor a `;` follows.
    #[error("line {line}: a function header has no body")]
    MissingBody {
        /// Where the header starts.
        line: usize,
    },
}

/// What a piece of the text is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PieceKind {
    /// Whitespace and comments.
    Trivia,
    /// A statement: a directive or an instruction, with its `;` where it has one. `.version`,
    /// `.target`, `.address_size`, `.file` and `.loc` end with their line instead; `.section`
    /// ends with the `}` of its block. A function declaration without body
    /// (`.extern .func f (.param .b64 a);`) is a statement too.
    Statement,
    /// A label, with its `:`.
    Label,
    /// A function's header: from its first directive (`.visible`, `.entry`, …) to the last text
    /// before the `{` of its body, performance directives such as `.reqntid` included.
    Header,
    /// `{` opening a function body or a nested block.
    Open,
    /// `}` closing one.
    Close,
}

/// A piece of the text: its kind, its byte range and the line it starts on (from 1).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Piece {
    /// What it is.
    pub kind: PieceKind,
    /// Where it is in the module's text.
    pub range: Range<usize>,
    /// The line it starts on.
    pub line: usize,
}

/// `.entry` (a kernel) or `.func` (a device function).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FunctionKind {
    /// A kernel.
    Entry,
    /// A device function.
    Func,
}

/// A function of the module: its header and the pieces of its body.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Function {
    /// Kernel or device function.
    pub kind: FunctionKind,
    /// Its name (empty if the header has none).
    pub name: String,
    /// The index of its header piece.
    pub header: usize,
    /// The indices of its body's pieces, from its `{` to its matching `}`, both included.
    pub body: Range<usize>,
}

/// `@%p` or `@!%p` before an instruction.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Guard {
    /// Whether the instruction runs when the predicate is false (`@!`).
    pub negated: bool,
    /// The predicate register.
    pub predicate: String,
}

/// An instruction statement, split into its parts (text slices of the module).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PtxInstruction<'a> {
    /// The guard, if any.
    pub guard: Option<Guard>,
    /// The opcode with its qualifiers: `ld.global.nc.v4.f32`.
    pub opcode: &'a str,
    /// The operands, with whitespace and comments around each trimmed: `%r1`, `[%rd1+8]`,
    /// `{%f1, %f2}`. Brackets, parentheses and braces keep their commas; comments inside an
    /// operand stay in it.
    pub operands: Vec<&'a str>,
    /// The line it starts on.
    pub line: usize,
}

impl PtxInstruction<'_> {
    /// The opcode's base name and qualifiers: `["ld", "global", "nc", "v4", "f32"]`.
    pub fn parts(&self) -> impl Iterator<Item = &str> {
        self.opcode.split('.')
    }

    /// Whether the opcode has qualifier `q`.
    pub fn has(&self, q: &str) -> bool {
        self.parts().skip(1).any(|p| p == q)
    }

    /// The base name: `ld`, `st`, `ret`, …
    pub fn base(&self) -> &str {
        self.parts().next().unwrap_or_default()
    }

    /// A load from global memory (`ld.global…`, `.nc` and vector forms included). Atomics and
    /// asynchronous copies (`cp.async`) are not loads.
    pub fn is_global_load(&self) -> bool {
        self.base() == "ld" && self.has("global")
    }

    /// A store to global memory.
    pub fn is_global_store(&self) -> bool {
        self.base() == "st" && self.has("global")
    }

    /// A load or store through a generic address, which may be global at run time.
    pub fn is_generic_access(&self) -> bool {
        matches!(self.base(), "ld" | "st")
            && !self.parts().skip(1).any(|q| q == "global" || super::memops::other_space(q))
    }

    /// `ret` or `exit`: where a function ends.
    pub fn is_return(&self) -> bool {
        matches!(self.base(), "ret" | "exit")
    }
}

/// A PTX module, read into pieces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PtxModule {
    text: String,
    pieces: Vec<Piece>,
    functions: Vec<Function>,
}

/// `text[range]`, or `""` where `range` is out of bounds or not on character boundaries (which
/// the lexer never produces).
fn slice(text: &str, range: Range<usize>) -> &str {
    text.get(range).unwrap_or_default()
}

/// Bytes of identifiers and directive names: PTX identifiers are ASCII.
fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, b'_' | b'$' | b'%')
}

/// How a statement ends, from the directives it starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ending {
    /// At its `;`.
    Semicolon,
    /// At the end of its line (`.version`, `.target`, `.address_size`, `.file`, `.loc`).
    Line,
    /// At the `}` of its block (`.section`), or at a `;` before any block.
    Block,
    /// At the `{` of its body (a function header), or at its `;` (a declaration).
    Header(FunctionKind),
}

#[derive(Clone)]
struct Lexer<'a> {
    bytes: &'a [u8],
    at: usize,
    line: usize,
}

impl Lexer<'_> {
    fn peek(&self, k: usize) -> Option<u8> {
        self.bytes.get(self.at.checked_add(k)?).copied()
    }

    fn bump(&mut self) {
        if let Some(&c) = self.bytes.get(self.at) {
            if c == b'\n' {
                self.line += 1;
            }
            self.at += 1;
        }
    }

    fn comment_starts(&self) -> bool {
        self.peek(0) == Some(b'/') && matches!(self.peek(1), Some(b'/' | b'*'))
    }

    /// Skips whitespace and comments; whether anything was skipped.
    fn trivia(&mut self) -> Result<bool, PtxError> {
        let start = self.at;
        loop {
            match (self.peek(0), self.peek(1)) {
                (Some(c), _) if c.is_ascii_whitespace() => self.bump(),
                (Some(b'/'), Some(b'/')) => {
                    while self.peek(0).is_some_and(|c| c != b'\n') {
                        self.bump();
                    }
                }
                (Some(b'/'), Some(b'*')) => self.block_comment()?,
                _ => return Ok(self.at > start),
            }
        }
    }

    /// Skips a `/* */` comment starting at its `/`.
    fn block_comment(&mut self) -> Result<(), PtxError> {
        let line = self.line;
        self.bump();
        self.bump();
        loop {
            match (self.peek(0), self.peek(1)) {
                (Some(b'*'), Some(b'/')) => {
                    self.bump();
                    self.bump();
                    return Ok(());
                }
                (Some(_), _) => self.bump(),
                (None, _) => return Err(PtxError::UnterminatedComment { line }),
            }
        }
    }

    /// Skips a string starting at its quote. Strings end on their line.
    fn string(&mut self) -> Result<(), PtxError> {
        let line = self.line;
        self.bump();
        loop {
            match self.peek(0) {
                Some(b'"') => {
                    self.bump();
                    return Ok(());
                }
                Some(b'\\') if self.peek(1).is_some_and(|c| c != b'\n') => {
                    self.bump();
                    self.bump();
                }
                Some(b'\n') | None => return Err(PtxError::UnterminatedString { line }),
                Some(_) => self.bump(),
            }
        }
    }

    /// Where a label at the current position ends (after its `:`): an identifier, blanks, and a
    /// single `:`.
    fn label_end(&self) -> Option<usize> {
        let rest = self.bytes.get(self.at..)?;
        let name = rest.iter().take_while(|&&c| is_ident(c)).count();
        let blanks = rest.get(name..)?.iter().take_while(|&&c| matches!(c, b' ' | b'\t')).count();
        let colon = name + blanks;
        (name > 0 && rest.get(colon) == Some(&b':') && rest.get(colon + 1) != Some(&b':'))
            .then_some(self.at + colon + 1)
    }

    /// How the statement at the current position ends, from the directive names it starts with
    /// (`.visible .entry`, `.loc`, …; whitespace and comments between them skipped).
    fn ending(&self) -> Ending {
        let mut lx = self.clone();
        let mut first = true;
        let mut ending = Ending::Semicolon;
        while lx.trivia().is_ok() && lx.peek(0) == Some(b'.') {
            lx.bump();
            let start = lx.at;
            while lx.peek(0).is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_') {
                lx.bump();
            }
            match (first, self.bytes.get(start..lx.at).unwrap_or_default()) {
                (true, b"version" | b"target" | b"address_size" | b"file" | b"loc") => {
                    return Ending::Line;
                }
                (true, b"section") => return Ending::Block,
                (_, b"entry") => return Ending::Header(FunctionKind::Entry),
                (_, b"func") => ending = Ending::Header(FunctionKind::Func),
                (_, b"") => break,
                _ => {}
            }
            first = false;
        }
        ending
    }

    /// Reads one statement from a character that is not trivia, a brace or a label. Brackets,
    /// parentheses, vector braces and initializers, strings and comments inside it are part of
    /// it. Returns the kind of piece it is: a statement or a function header.
    fn statement(&mut self) -> Result<(PieceKind, Ending), PtxError> {
        let line = self.line;
        let ending = self.ending();
        let statement = (PieceKind::Statement, ending);
        // After the last byte that is not whitespace or a comment: where a statement that ends
        // without a `;` (a header, a line directive) ends, leaving what follows to trivia.
        let mut last = (self.at, self.line);
        let mut nesting = 0usize; // ( and [
        let mut braces: Vec<usize> = Vec::new(); // lines of the open braces of this statement
        loop {
            let Some(c) = self.peek(0) else {
                if ending == Ending::Line && braces.is_empty() {
                    (self.at, self.line) = last;
                    return Ok(statement);
                }
                return Err(match ending {
                    Ending::Header(_) => PtxError::MissingBody { line },
                    _ => match braces.first() {
                        Some(&open) => PtxError::UnclosedBrace { line: open },
                        None => PtxError::UnterminatedStatement { line },
                    },
                });
            };
            match c {
                b'\n' if ending == Ending::Line => {
                    if let Some(&open) = braces.first() {
                        return Err(PtxError::UnclosedBrace { line: open });
                    }
                    (self.at, self.line) = last;
                    return Ok(statement);
                }
                b'/' if self.comment_starts() => {
                    if ending == Ending::Line && self.peek(1) == Some(b'/') {
                        (self.at, self.line) = last;
                        return Ok(statement);
                    }
                    let before = self.line;
                    self.block_or_line_comment()?;
                    if ending == Ending::Line && self.line != before {
                        (self.at, self.line) = last;
                        return Ok(statement);
                    }
                    continue;
                }
                b'"' => self.string()?,
                b'(' | b'[' => {
                    nesting += 1;
                    self.bump();
                }
                b')' | b']' => {
                    nesting = nesting.saturating_sub(1);
                    self.bump();
                }
                b'{' if nesting == 0
                    && braces.is_empty()
                    && matches!(ending, Ending::Header(_)) =>
                {
                    // The body: the header ends before it, and what lies between is trivia.
                    (self.at, self.line) = last;
                    return Ok((PieceKind::Header, ending));
                }
                b'{' => {
                    braces.push(self.line);
                    self.bump();
                }
                b'}' => {
                    if braces.pop().is_none() {
                        // The `}` of the enclosing block: this statement lacks its `;`.
                        return Err(PtxError::UnterminatedStatement { line });
                    }
                    self.bump();
                    if ending == Ending::Block && braces.is_empty() && nesting == 0 {
                        return Ok(statement);
                    }
                }
                b';' if nesting == 0 => {
                    if ending != Ending::Block
                        && let Some(&open) = braces.first()
                    {
                        return Err(PtxError::UnclosedBrace { line: open });
                    }
                    if braces.is_empty() {
                        self.bump();
                        return Ok(statement);
                    }
                    self.bump();
                }
                _ => self.bump(),
            }
            if !c.is_ascii_whitespace() {
                last = (self.at, self.line);
            }
        }
    }

    /// Skips the comment at the current position, of either kind.
    fn block_or_line_comment(&mut self) -> Result<(), PtxError> {
        if self.peek(1) == Some(b'*') {
            self.block_comment()
        } else {
            while self.peek(0).is_some_and(|c| c != b'\n') {
                self.bump();
            }
            Ok(())
        }
    }
}

/// A function whose header has been read and whose body is being read.
struct Open {
    kind: FunctionKind,
    header: usize,
    body_start: usize,
}

impl PtxModule {
    /// Reads `text`.
    ///
    /// # Errors
    ///
    /// A [`PtxError`] naming the line, for an unterminated comment, string or statement, braces
    /// that do not balance, or a function header without body.
    pub fn parse(text: &str) -> Result<PtxModule, PtxError> {
        let mut lx = Lexer { bytes: text.as_bytes(), at: 0, line: 1 };
        let mut pieces: Vec<Piece> = Vec::new();
        let mut functions: Vec<Function> = Vec::new();
        let mut depth: Vec<usize> = Vec::new(); // lines of the open braces
        // The function being read, and the header read but whose `{` is still to come.
        let mut function: Option<Open> = None;
        let mut header: Option<(usize, FunctionKind)> = None;
        loop {
            let (start, line) = (lx.at, lx.line);
            if lx.trivia()? {
                pieces.push(Piece { kind: PieceKind::Trivia, range: start..lx.at, line });
                continue;
            }
            let Some(c) = lx.peek(0) else { break };
            let kind = match c {
                b'{' => {
                    lx.bump();
                    depth.push(line);
                    if let Some((index, kind)) = header.take() {
                        function = Some(Open { kind, header: index, body_start: pieces.len() });
                    }
                    PieceKind::Open
                }
                b'}' => {
                    lx.bump();
                    if depth.pop().is_none() {
                        return Err(PtxError::UnopenedBrace { line });
                    }
                    if depth.is_empty()
                        && let Some(open) = function.take()
                    {
                        let name = function_name(slice(text, pieces[open.header].range.clone()));
                        functions.push(Function {
                            kind: open.kind,
                            name,
                            header: open.header,
                            body: open.body_start..pieces.len() + 1,
                        });
                    }
                    PieceKind::Close
                }
                _ => match lx.label_end() {
                    Some(end) => {
                        while lx.at < end {
                            lx.bump();
                        }
                        PieceKind::Label
                    }
                    None => {
                        let (kind, ending) = lx.statement()?;
                        if lx.at == start {
                            // Cannot happen: every statement has at least one byte.
                            return Err(PtxError::UnterminatedStatement { line });
                        }
                        if kind == PieceKind::Header {
                            if let Some(&open) = depth.last() {
                                // Functions do not nest: the block before lacks its `}`.
                                return Err(PtxError::UnclosedBrace { line: open });
                            }
                            if let Ending::Header(function_kind) = ending {
                                header = Some((pieces.len(), function_kind));
                            }
                        }
                        kind
                    }
                },
            };
            pieces.push(Piece { kind, range: start..lx.at, line });
        }
        if let Some(&line) = depth.last() {
            return Err(PtxError::UnclosedBrace { line });
        }
        Ok(PtxModule { text: text.to_owned(), pieces, functions })
    }

    /// The module's text, exactly as it was read.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The pieces, in order; their ranges cover the text without gap or overlap.
    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }

    /// The text of piece `i` (`""` if there is no piece `i`).
    pub fn piece_text(&self, i: usize) -> &str {
        self.pieces.get(i).map_or("", |p| slice(&self.text, p.range.clone()))
    }

    /// The functions, kernels and device functions, in order.
    pub fn functions(&self) -> &[Function] {
        &self.functions
    }

    /// The function called `name`.
    pub fn function(&self, name: &str) -> Option<&Function> {
        self.functions.iter().find(|f| f.name == name)
    }

    /// The kernels.
    pub fn entries(&self) -> impl Iterator<Item = &Function> {
        self.functions.iter().filter(|f| f.kind == FunctionKind::Entry)
    }

    /// The argument of the directive `name` (`.version`, `.target`, `.address_size`) in its first
    /// statement, trimmed: `"9.0"`, `"sm_90"`, `"64"`.
    pub fn directive(&self, name: &str) -> Option<&str> {
        self.pieces.iter().filter(|p| p.kind == PieceKind::Statement).find_map(|p| {
            let s = slice(&self.text, p.range.clone());
            let s = s.strip_suffix(';').unwrap_or(s).trim();
            let rest = s.strip_prefix(name)?;
            rest.starts_with(|c: char| c.is_ascii_whitespace()).then(|| rest.trim())
        })
    }

    /// The architecture of `.target` (`.target sm_90a, debug`): its word (`"sm_90a"`, what
    /// `ptxas -arch` takes) and its SM version (90).
    pub fn target(&self) -> Option<(&str, u32)> {
        self.directive(".target")?.split(',').map(str::trim).find_map(|word| {
            let digits = word.strip_prefix("sm_")?;
            let sm = digits.trim_end_matches(|c: char| c.is_ascii_alphabetic()).parse().ok()?;
            Some((word, sm))
        })
    }

    /// The instructions of function `f`, nested blocks included, with the index of the piece
    /// each is.
    pub fn instructions(&self, f: &Function) -> Vec<(usize, PtxInstruction<'_>)> {
        f.body
            .clone()
            .filter_map(|i| Some((i, self.pieces.get(i)?)))
            .filter(|(_, p)| p.kind == PieceKind::Statement)
            .filter_map(|(i, p)| {
                Some((i, instruction(slice(&self.text, p.range.clone()), p.line)?))
            })
            .collect()
    }
}

/// Skips whitespace and comments in `s` from `at`; an unterminated comment runs to the end.
fn skip_trivia(s: &[u8], mut at: usize) -> usize {
    loop {
        match (s.get(at), s.get(at + 1)) {
            (Some(c), _) if c.is_ascii_whitespace() => at += 1,
            (Some(b'/'), Some(b'/')) => {
                while s.get(at).is_some_and(|&c| c != b'\n') {
                    at += 1;
                }
            }
            (Some(b'/'), Some(b'*')) => {
                at += 2;
                while s.get(at).is_some()
                    && !(s.get(at) == Some(&b'*') && s.get(at + 1) == Some(&b'/'))
                {
                    at += 1;
                }
                at = (at + 2).min(s.len());
            }
            _ => return at,
        }
    }
}

/// The name in a function header: the identifier after its directives and an optional
/// return-value list `(.param .b32 r)`.
fn function_name(header: &str) -> String {
    let s = header.as_bytes();
    let mut at = skip_trivia(s, 0);
    while s.get(at) == Some(&b'.') {
        at += 1;
        while s.get(at).is_some_and(|&c| c.is_ascii_alphanumeric() || c == b'_') {
            at += 1;
        }
        at = skip_trivia(s, at);
    }
    if s.get(at) == Some(&b'(') {
        let mut nesting = 0usize;
        while let Some(&c) = s.get(at) {
            at += 1;
            match c {
                b'(' => nesting += 1,
                b')' => {
                    nesting -= 1;
                    if nesting == 0 {
                        break;
                    }
                }
                _ => {}
            }
        }
        at = skip_trivia(s, at);
    }
    let end = at + s.get(at..).unwrap_or_default().iter().take_while(|&&c| is_ident(c)).count();
    slice(header, at..end).to_owned()
}

/// `text` (one statement) as an instruction, or `None` for a directive or text that does not
/// start with an opcode.
fn instruction(text: &str, line: usize) -> Option<PtxInstruction<'_>> {
    let s = text.as_bytes();
    let end = if s.last() == Some(&b';') { s.len() - 1 } else { s.len() };
    let mut at = skip_trivia(s, 0);
    let guard = if s.get(at) == Some(&b'@') {
        at += 1;
        let negated = s.get(at) == Some(&b'!');
        if negated {
            at += 1;
        }
        let from = at;
        while s.get(at).is_some_and(|&c| is_ident(c)) {
            at += 1;
        }
        let predicate = slice(text, from..at).to_owned();
        at = skip_trivia(s, at);
        Some(Guard { negated, predicate })
    } else {
        None
    };
    let from = at;
    while s.get(at).is_some_and(|&c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b':')) {
        at += 1;
    }
    if at == from || s.get(from) == Some(&b'.') || at > end {
        return None;
    }
    let opcode = slice(text, from..at);
    let operands = operands(text, at, end);
    Some(PtxInstruction { guard, opcode, operands, line })
}

/// The operands in `text[from..end]`: split at commas outside brackets, parentheses, braces,
/// strings and comments, each trimmed of whitespace and comments.
fn operands(text: &str, from: usize, end: usize) -> Vec<&str> {
    let s = text.as_bytes();
    let mut operands = Vec::new();
    let mut nesting = 0usize;
    // The current operand's first and last significant bytes.
    let mut first: Option<usize> = None;
    let mut last = from;
    let mut at = from;
    let mut any = false;
    while at < end {
        let Some(&c) = s.get(at) else { break };
        match c {
            b'/' if matches!(s.get(at + 1), Some(b'/' | b'*')) => {
                at = skip_trivia(s, at).min(end);
                continue;
            }
            b',' if nesting == 0 => {
                operands.push(slice(text, first.map_or(at..at, |f| f..last)));
                first = None;
                any = true;
                at += 1;
                continue;
            }
            b'"' => {
                let start = at;
                at += 1;
                while at < end && s.get(at) != Some(&b'"') {
                    at += if s.get(at) == Some(&b'\\') { 2 } else { 1 };
                }
                at = (at + 1).min(end);
                first.get_or_insert(start);
                last = at;
                continue;
            }
            b'(' | b'[' | b'{' => nesting += 1,
            b')' | b']' | b'}' => nesting = nesting.saturating_sub(1),
            _ => {}
        }
        at += 1;
        if !c.is_ascii_whitespace() {
            first.get_or_insert(at - 1);
            last = at;
        }
    }
    if any || first.is_some() {
        operands.push(slice(text, first.map_or(at..at, |f| f..last)));
    }
    operands
}
