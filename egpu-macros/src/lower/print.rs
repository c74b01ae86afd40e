//! `egpu::print!`, the only macro of probes, and the placeholders of its format.

use proc_macro2::TokenStream;
use quote::quote_spanned;
use syn::spanned::Spanned;
use syn::{Expr, Lit};

use super::Lower;

impl Lower {
    /// `egpu::print!("format", args..)`: the only macro of probes. The format's placeholders
    /// (`{}`, `{:x}`, `{:#x}`) must match the arguments, six at most.
    pub(super) fn print(&mut self, mac: &syn::Macro) -> TokenStream {
        let p = self.builder();
        let is_print = mac.path.segments.len() == 2
            && mac.path.segments[0].ident == "egpu"
            && mac.path.segments[1].ident == "print";
        if !is_print {
            return self.error(
                mac.span(),
                "the only macro of probes is `egpu::print!(\"format {}\", value)`",
            );
        }
        let parser = syn::punctuated::Punctuated::<Expr, syn::Token![,]>::parse_terminated;
        let args = match mac.parse_body_with(parser) {
            Ok(args) => args,
            Err(e) => return self.error(e.span(), e.to_string()),
        };
        let mut args = args.into_iter();
        let Some(Expr::Lit(syn::ExprLit { lit: Lit::Str(format), .. })) = args.next() else {
            return self
                .error(mac.span(), "`egpu::print!` starts with a string literal: the format");
        };
        let args: Vec<Expr> = args.collect();
        match placeholders(&format.value()) {
            None => {
                return self.error(
                    format.span(),
                    "formats take `{}`, `{:x}` and `{:#x}` (and `{{`, `}}` for braces)",
                );
            }
            Some(n) if n != args.len() => {
                return self.error(
                    format.span(),
                    format!("the format has {n} placeholders for {} arguments", args.len()),
                );
            }
            Some(_) if args.len() > 6 => {
                return self.error(mac.span(), "`egpu::print!` takes at most 6 arguments");
            }
            Some(_) => {}
        }
        let values: Vec<TokenStream> = args
            .iter()
            .map(|a| {
                let v = self.expr(a);
                quote_spanned!(a.span()=> #p::print_arg(#v))
            })
            .collect();
        quote_spanned!(mac.span()=> #p::print(#format, &[#(#values),*]);)
    }
}

/// How many arguments a `print!` format takes, or `None` for a brace use it does not know.
fn placeholders(format: &str) -> Option<usize> {
    let mut n = 0;
    let mut rest = format;
    while let Some(i) = rest.find(['{', '}']) {
        rest = &rest[i..];
        let spec = ["{{", "}}", "{}", "{:x}", "{:#x}"].into_iter().find(|s| rest.starts_with(s))?;
        n += usize::from(!matches!(spec, "{{" | "}}"));
        rest = &rest[spec.len()..];
    }
    Some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn print_formats_count_their_placeholders() {
        assert_eq!(placeholders("no placeholder"), Some(0));
        assert_eq!(placeholders("{} and {:x} and {:#x}"), Some(3));
        assert_eq!(placeholders("{{literal}} {}"), Some(1));
        assert_eq!(placeholders("{:>8}"), None);
        assert_eq!(placeholders("{0}"), None);
    }
}
