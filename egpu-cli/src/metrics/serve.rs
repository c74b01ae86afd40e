//! The metrics endpoint: `tiny_http` on a thread of its own (no async runtime), serving
//! `GET /metrics` in the format the scraper asks for, until `egpu run` exits.

use std::net::SocketAddr;
use std::sync::Arc;

use super::{Exporter, prometheus};
use crate::{Error, failed};

/// Listens on `address` (before the command starts, so that its first scrape finds the
/// server) and serves `exporter`'s metrics at `http://ADDRESS/metrics` from a thread of its own.
/// Returns the address taken (port 0 takes a free one).
pub(crate) fn serve(address: SocketAddr, exporter: Arc<Exporter>) -> Result<SocketAddr, Error> {
    let listener = std::net::TcpListener::bind(address)
        .map_err(|e| failed(format!("listening on {address}: {e}")))?;
    let bound = listener.local_addr().map_err(|e| failed(format!("{address}: {e}")))?;
    let server = tiny_http::Server::from_listener(listener, None)
        .map_err(|e| failed(format!("serving on {bound}: {e}")))?;
    let registry = prometheus::registry(exporter);
    std::thread::spawn(move || {
        for request in server.incoming_requests() {
            let path = request.url().split('?').next().unwrap_or_default();
            let get = matches!(request.method(), tiny_http::Method::Get | tiny_http::Method::Head);
            let response = match path {
                "/metrics" if get => {
                    let accept = request
                        .headers()
                        .iter()
                        .find(|h| h.field.equiv("Accept"))
                        .map(|h| h.value.as_str().to_owned());
                    let (body, content_type) = prometheus::render(&registry, accept.as_deref());
                    text(200, body, content_type)
                }
                "/" if get => text(200, "egpu: the metrics are at /metrics\n".into(), "text/plain"),
                "/metrics" | "/" => text(405, "only GET\n".into(), "text/plain"),
                _ => text(404, "not found: the metrics are at /metrics\n".into(), "text/plain"),
            };
            // A scraper that hung up is no concern of the others.
            let _ = request.respond(response);
        }
    });
    Ok(bound)
}

/// A response of `status` with `body` as `content_type`.
fn text(
    status: u16,
    body: String,
    content_type: &str,
) -> tiny_http::Response<std::io::Cursor<Vec<u8>>> {
    let response = tiny_http::Response::from_string(body).with_status_code(status);
    match tiny_http::Header::from_bytes("Content-Type", content_type) {
        Ok(header) => response.with_header(header),
        Err(()) => response,
    }
}
