//! Reading PTX, statement by statement.
//!
//! [`PtxModule::parse`] splits a PTX module into pieces that cover its text exactly, with
//! nothing lost and nothing rewritten: whitespace and comments, statements (each with its `;`; the
//! directives that have none, `.version`, `.target`, `.address_size`, `.file` and `.loc`, end with
//! their line, and a `.section` with its `{ }` block), labels, function headers, and the braces of
//! function bodies and nested blocks. Functions (`.entry` and `.func`) are found with their
//! bodies; a declaration without body is a statement. Each statement is either a directive
//! (`.reg`, `.shared`, …) or a [`PtxInstruction`]: an optional guard predicate, an opcode with its
//! dot-separated qualifiers, and operands (vector operands `{%f1, %f2}` and addresses `[%rd1+8]`
//! kept whole). Everything the reader does not need to understand stays verbatim, so an injector
//! can insert text between pieces and leave the rest byte for byte as it was.
//!
//! Malformed text (an unterminated comment, string or statement, unbalanced braces, a header
//! without body) is a [`PtxError`] with the line, never a panic, whatever the text.
//!
//! ```
//! use egpu_ptx::ptx::PtxModule;
//!
//! let ptx = ".version 9.0\n.target sm_90\n.address_size 64\n\
//!            .visible .entry k(.param .u64 p)\n{\n\t.reg .b64 %rd<2>;\n\
//!            \tld.param.u64 %rd1, [p];\n\t@%p1 ld.global.u64 %rd1, [%rd1+8];\n\tret;\n}\n";
//! let module = PtxModule::parse(ptx)?;
//! assert_eq!(module.directive(".target"), Some("sm_90"));
//! assert_eq!(module.target(), Some(("sm_90", 90)));
//! let debug = PtxModule::parse(&ptx.replace("sm_90", "sm_90a, debug"))?;
//! assert_eq!(debug.target(), Some(("sm_90a", 90)));
//! let kernel = module.function("k").unwrap();
//! let loads: Vec<_> = module
//!     .instructions(kernel)
//!     .into_iter()
//!     .filter(|(_, i)| i.is_global_load())
//!     .map(|(_, i)| i.operands)
//!     .collect();
//! assert_eq!(loads, [["%rd1", "[%rd1+8]"]]);
//! let text: String = (0..module.pieces().len()).map(|i| module.piece_text(i)).collect();
//! assert_eq!(text, ptx);
//! # Ok::<(), egpu_ptx::ptx::PtxError>(())
//! ```

pub mod memops;
mod reader;

pub use memops::{Bytes, GlobalAccess, MemClass, Touch, global_access};
pub use reader::{
    Function, FunctionKind, Guard, Piece, PieceKind, PtxError, PtxInstruction, PtxModule,
};

#[cfg(test)]
mod tests;
