//! The arguments of `#[egpu::probe(..)]` and `#[egpu::helper(..)]`: a probe's attach point, and
//! the `crate = PATH` option, the path by which the generated code names egpu.
//!
//! `#[egpu::probe(host::launch, crate = crate::egpu_root)]`: options follow the attach point,
//! separated by commas. The generated code names egpu's facade (`probe`, `ebpf`, `__private`)
//! as `::egpu` by default; a crate beneath the facade, which cannot name it, gives a module
//! that re-exports the same items instead.

use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{quote, quote_spanned};
use syn::parse::{ParseStream, Parser};
use syn::{Path, Token};

/// The path by which generated code names egpu: `::egpu`, or the one `crate = PATH` gives.
#[derive(Clone, Default)]
pub(crate) struct Krate(Option<Path>);

impl Krate {
    /// The path's tokens. The default, `::egpu`, takes `span` (where the generated code that
    /// names it comes from); a path the user gave keeps its own, so that rustc's errors about it
    /// point at the attribute.
    pub(crate) fn at(&self, span: Span) -> TokenStream {
        match &self.0 {
            Some(path) => quote!(#path),
            None => quote_spanned!(span=> ::egpu),
        }
    }

    /// `PATH::__private::probe`: the probe builder, which the lowered body calls.
    pub(crate) fn builder(&self) -> TokenStream {
        let krate = self.at(Span::call_site());
        quote!(#krate::__private::probe)
    }
}

/// An attribute's arguments.
pub(crate) struct Args {
    /// The arguments that are not options: a probe's attach point (empty when there is none).
    pub(crate) attach: TokenStream,
    /// The path by which generated code names egpu.
    pub(crate) krate: Krate,
}

/// The shape of the option, for error messages.
const SHAPE: &str = "`crate = PATH` names egpu (`::egpu` by default), or a module that re-exports \
                     its `probe`, `ebpf` and `__private`: `crate = crate::egpu_root`";

/// Splits an attribute's arguments at their commas into the options and the rest (the attach
/// point, which may appear once).
pub(crate) fn parse(attr: TokenStream) -> syn::Result<Args> {
    let parser = |input: ParseStream<'_>| {
        let mut attach: Option<TokenStream> = None;
        let mut krate: Option<Path> = None;
        while !input.is_empty() {
            if input.peek(Token![crate]) {
                let key: Token![crate] = input.parse()?;
                if krate.is_some() {
                    return Err(syn::Error::new(key.span, "`crate = PATH` is given twice"));
                }
                krate = Some(crate_path(input)?);
            } else if input.peek(syn::Ident) && input.peek2(Token![=]) {
                let key: syn::Ident = input.parse()?;
                return Err(syn::Error::new(
                    key.span(),
                    format!("unknown option `{key}`: the only option is {SHAPE}"),
                ));
            } else {
                let mut tokens = TokenStream::new();
                while !input.is_empty() && !input.peek(Token![,]) {
                    tokens.extend([input.parse::<TokenTree>()?]);
                }
                if attach.is_some() {
                    return Err(syn::Error::new_spanned(
                        tokens,
                        "one attach point: the other arguments are options (`crate = PATH`)",
                    ));
                }
                attach = Some(tokens);
            }
            if !input.is_empty() {
                input.parse::<Token![,]>()?;
            }
        }
        Ok(Args { attach: attach.unwrap_or_default(), krate: Krate(krate) })
    };
    parser.parse2(attr)
}

/// The `= PATH` of `crate = PATH`: a path without generics, followed by `,` or the end.
fn crate_path(input: ParseStream<'_>) -> syn::Result<Path> {
    input
        .parse::<Token![=]>()
        .map_err(|e| syn::Error::new(e.span(), format!("expected `=`: {SHAPE}")))?;
    if let Ok(lit) = input.fork().parse::<syn::LitStr>() {
        return Err(syn::Error::new(
            lit.span(),
            format!("write the path without quotes: `crate = {}`", lit.value()),
        ));
    }
    let path = Path::parse_mod_style(input)
        .map_err(|e| syn::Error::new(e.span(), format!("expected a path: {SHAPE}")))?;
    if !input.is_empty() && !input.peek(Token![,]) {
        return Err(input.error(format!("expected `,` or the end after the path: {SHAPE}")));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(attr: TokenStream) -> String {
        parse(attr).err().expect("an error").to_string()
    }

    #[test]
    fn the_attach_point_and_the_crate_path_are_split() {
        let args = parse(quote!(host::launch::exit, crate = crate::egpu_root)).unwrap();
        assert_eq!(args.attach.to_string(), "host :: launch :: exit");
        assert_eq!(args.krate.builder().to_string(), "crate :: egpu_root :: __private :: probe");
        let args = parse(quote!(crate = ::egpu, user,)).unwrap();
        assert_eq!(args.attach.to_string(), "user");
        let args = parse(quote!(device::global_load)).unwrap();
        assert_eq!(args.krate.builder().to_string(), ":: egpu :: __private :: probe");
        assert!(parse(TokenStream::new()).unwrap().attach.is_empty());
    }

    /// With `crate = PATH`, nothing the macros generate names `::egpu`: not the probe's handle,
    /// the builder calls, the twin's arithmetic, a helper's signature, nor the stubs after an
    /// error.
    #[test]
    fn the_crate_path_replaces_every_path_to_egpu() {
        let probe = quote! {
            fn every_construct(ctx: &mut Ctx) -> u64 {
                let mut x = ctx.a + 1;
                x -= -ctx.b[0] * 2;
                let s = Pair { a: x, b: [0; 2] };
                if let Some(v) = MAP.get(&x) { x += v.a; }
                for i in 0..4 { x <<= i; }
                #[bound(8)]
                while x > 100 { x /= 2; }
                let y = match x { 0 => 1, 1..=9 => 2, _ => ktime_ns() };
                MAP.insert(&x, &s);
                ctx.c = twice(y % 3);
                x
            }
        };
        let out = crate::probe::expand(quote!(user, crate = crate::root), probe).unwrap();
        let helper = quote!(
            fn twice(mut v: u64) -> u64 {
                v *= 2;
                v
            }
        );
        let helper = crate::helper::expand(quote!(crate = crate::root), helper).unwrap();
        let stubs = quote!(
            fn refused(ctx: &Ctx) {
                let f = 1.5;
            }
        );
        let stubs = crate::probe::expand(quote!(user, crate = crate::root), stubs).unwrap();
        for out in [out, helper, stubs] {
            let text = out.to_string();
            assert!(!text.contains(":: egpu"), "{text}");
            assert!(text.contains("crate :: root ::"), "{text}");
        }
    }

    #[test]
    fn malformed_options_are_errors() {
        assert!(error(quote!(user, crate = "::egpu")).starts_with("write the path without quotes"));
        assert!(error(quote!(user, crate)).starts_with("expected `=`"));
        assert!(error(quote!(user, crate =)).starts_with("expected a path"));
        assert!(error(quote!(user, crate = a::b<T>)).starts_with("expected `,` or the end"));
        assert!(error(quote!(user, crate = a, crate = b)).contains("given twice"));
        assert!(error(quote!(user, krate = a)).starts_with("unknown option `krate`"));
        assert!(error(quote!(user, host::launch)).starts_with("one attach point"));
    }
}
