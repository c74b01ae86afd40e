//! Pushing the built-in metrics to an OpenTelemetry collector over OTLP/HTTP (`POST
//! /v1/metrics`): the `otlp` feature. The body is an export request, JSON
//! ([`builtin::otlp_json`](super::builtin::otlp_json)) or protobuf (which the `egpu` command
//! encodes, so that no protobuf crate enters the preloaded library). Plain HTTP only, as
//! collectors listen on a local port (4318); no dependency beyond `std`.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Why a push failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OtlpError {
    /// The endpoint is not `http://HOST:PORT[/PATH]`.
    #[error("`{0}`: an OTLP/HTTP endpoint is http://HOST:PORT[/PATH] (https is not supported)")]
    Endpoint(String),
    /// The collector could not be reached or did not answer.
    #[error("{endpoint}: {error}")]
    Io {
        /// The endpoint.
        endpoint: String,
        /// Why.
        error: std::io::Error,
    },
    /// The collector answered with an error.
    #[error("{endpoint}: the collector answered `{status}`")]
    Refused {
        /// The endpoint.
        endpoint: String,
        /// Its status line.
        status: String,
    },
}

/// An OTLP/HTTP metrics endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// `HOST:PORT`.
    pub authority: String,
    /// The path (default `/v1/metrics`).
    pub path: String,
}

impl std::str::FromStr for Endpoint {
    type Err = OtlpError;

    fn from_str(url: &str) -> Result<Endpoint, OtlpError> {
        let bad = || OtlpError::Endpoint(url.into());
        let rest = url.strip_prefix("http://").ok_or_else(bad)?;
        let (authority, path) = match rest.find('/') {
            Some(at) => (&rest[..at], &rest[at..]),
            None => (rest, "/v1/metrics"),
        };
        let (host, port) = authority.rsplit_once(':').ok_or_else(bad)?;
        if host.is_empty() || port.parse::<u16>().is_err() || path.contains(char::is_whitespace) {
            return Err(bad());
        }
        let path = if path == "/" { "/v1/metrics" } else { path };
        Ok(Endpoint { authority: authority.into(), path: path.into() })
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "http://{}{}", self.authority, self.path)
    }
}

/// Posts `body` (an export request, JSON) to `endpoint`, waiting `timeout` at most for each step.
pub fn post(endpoint: &Endpoint, body: &str, timeout: Duration) -> Result<(), OtlpError> {
    post_as(endpoint, body.as_bytes(), JSON, timeout)
}

/// The `Content-Type` of an OTLP/HTTP JSON export request.
pub const JSON: &str = "application/json";

/// The `Content-Type` of an OTLP/HTTP protobuf export request.
pub const PROTOBUF: &str = "application/x-protobuf";

/// Posts `body`, an export request encoded as `content_type` says ([`JSON`] or [`PROTOBUF`]), to
/// `endpoint`, waiting `timeout` at most for each step.
pub fn post_as(
    endpoint: &Endpoint,
    body: &[u8],
    content_type: &str,
    timeout: Duration,
) -> Result<(), OtlpError> {
    let io = |error| OtlpError::Io { endpoint: endpoint.to_string(), error };
    let address = endpoint
        .authority
        .to_socket_addrs()
        .map_err(io)?
        .next()
        .ok_or_else(|| io(std::io::Error::other("no address")))?;
    let mut stream = TcpStream::connect_timeout(&address, timeout).map_err(io)?;
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    let head = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        endpoint.path,
        endpoint.authority,
        body.len()
    );
    stream.write_all(&[head.as_bytes(), body].concat()).map_err(io)?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    // The status line is all that matters; stop at its end or when the collector closes.
    while !answer.contains(&b'\n') {
        match stream.read(&mut buf).map_err(io)? {
            0 => break,
            n => answer.extend_from_slice(&buf[..n]),
        }
    }
    let answer = String::from_utf8_lossy(&answer);
    let status = answer.lines().next().unwrap_or_default().trim().to_owned();
    match status.split_whitespace().nth(1) {
        Some(code) if code.starts_with('2') => Ok(()),
        _ => Err(OtlpError::Refused { endpoint: endpoint.to_string(), status }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_read_and_bad_ones_refused() {
        let e: Endpoint = "http://127.0.0.1:4318".parse().expect("an endpoint");
        assert_eq!((e.authority.as_str(), e.path.as_str()), ("127.0.0.1:4318", "/v1/metrics"));
        let e: Endpoint = "http://collector:4318/otlp/v1/metrics".parse().expect("an endpoint");
        assert_eq!(e.to_string(), "http://collector:4318/otlp/v1/metrics");
        for bad in ["https://h:4318", "127.0.0.1:4318", "http://h", "http://:1", "http://h:x", ""] {
            assert!(bad.parse::<Endpoint>().is_err(), "{bad}");
        }
    }

    #[test]
    fn a_push_is_a_post_and_errors_say_why() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
        let endpoint: Endpoint =
            format!("http://{}", listener.local_addr().expect("the address")).parse().expect("ok");
        let server = std::thread::spawn(move || {
            let mut got = Vec::new();
            for (i, stream) in listener.incoming().take(3).enumerate() {
                let mut stream = stream.expect("a connection");
                let mut request = vec![0u8; 4096];
                let n = stream.read(&mut request).expect("a request");
                got.push(request[..n].to_vec());
                let status = if i == 1 { "400 Bad Request" } else { "200 OK" };
                let _ = write!(stream, "HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n");
            }
            got
        });
        let timeout = Duration::from_secs(5);
        post(&endpoint, "{\"resourceMetrics\":[]}", timeout).expect("accepted");
        let refused = post(&endpoint, "{}", timeout).expect_err("refused").to_string();
        assert!(refused.contains("400 Bad Request"), "{refused}");
        // Protobuf: the bytes as they are, under their content type.
        post_as(&endpoint, &[0x0a, 0x00, 0xff], PROTOBUF, timeout).expect("accepted");
        let got = server.join().expect("the server");
        let protobuf = String::from_utf8_lossy(&got[2]).into_owned();
        assert!(protobuf.contains("Content-Type: application/x-protobuf\r\n"), "{protobuf}");
        assert!(got[2].ends_with(b"\r\n\r\n\x0a\x00\xff"), "{protobuf}");
        let got: Vec<String> =
            got[..2].iter().map(|r| String::from_utf8_lossy(r).into_owned()).collect();
        assert!(got[0].starts_with("POST /v1/metrics HTTP/1.1\r\n"), "{}", got[0]);
        assert!(got[0].contains("Content-Type: application/json\r\n"), "{}", got[0]);
        assert!(got[0].ends_with("\r\n\r\n{\"resourceMetrics\":[]}"), "{}", got[0]);
        // Nobody listening.
        let closed: Endpoint = "http://127.0.0.1:1".parse().expect("an endpoint");
        assert!(matches!(post(&closed, "{}", timeout), Err(OtlpError::Io { .. })));
    }
}
