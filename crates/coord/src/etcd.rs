//! The coordinator's state and leadership in etcd (`cads coord --etcd URL`), so that a standby
//! coordinator takes over when the leader dies (004 §2.1 has a shadow coordinator; this is it).
//!
//! Coordinators campaign for one key, `cads/coordinator/leader`, held under an etcd lease: the
//! one whose transaction creates it leads; the others stand by and try again. The leader renews
//! its lease at every step and stops leading once a renewal fails or half the lease has passed
//! since the last one that worked, so it has stopped before etcd lets another take over. Its
//! state ([`SavedState`]) lives in `cads/coordinator/state`, written in a transaction that
//! succeeds only while the leader key still names it: a coordinator that lost the lead without
//! knowing yet cannot overwrite its successor's state, and since a change is saved before it is
//! published ([`crate::service`]), it cannot publish one either.
//!
//! etcd is spoken to through its JSON gateway (HTTP/1.1, one request per connection), which
//! needs no client library: keys and values are base64 in the JSON, 64-bit numbers are strings.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use serde_json::{json, Value};

use crate::state_file::SavedState;

/// The key whose holder leads.
pub const LEADER_KEY: &str = "cads/coordinator/leader";
/// The key holding the leader's state.
pub const STATE_KEY: &str = "cads/coordinator/state";

/// How long a call to etcd may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

/// An etcd endpoint, by its client URL (`http://127.0.0.1:2379`).
#[derive(Clone, Debug)]
pub struct Etcd {
    addr: SocketAddr,
    host: String,
}

impl Etcd {
    /// The endpoint at `url` (`http://host:port`; TLS is not spoken).
    pub fn new(url: &str) -> Result<Etcd, String> {
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("{url:?}: give etcd's client URL as http://host:port"))?;
        let host = rest.trim_end_matches('/').to_string();
        let addr = host
            .to_socket_addrs()
            .map_err(|e| format!("{url:?}: {e}"))?
            .next()
            .ok_or_else(|| format!("{url:?} names no address"))?;
        Ok(Etcd { addr, host })
    }

    /// A lease of `ttl` seconds; its id.
    pub fn grant(&self, ttl: u64) -> io::Result<i64> {
        let reply = self.call("/v3/lease/grant", &json!({ "TTL": ttl }))?;
        int(&reply["ID"]).ok_or_else(|| invalid("a lease grant without an id"))
    }

    /// Renews lease `id`; false once it has expired (its keys are gone).
    pub fn keep_alive(&self, id: i64) -> io::Result<bool> {
        let reply = self.call("/v3/lease/keepalive", &json!({ "ID": id.to_string() }))?;
        Ok(int(&reply["result"]["TTL"]).is_some_and(|ttl| ttl > 0))
    }

    /// Creates `key` holding `value` under lease `lease` if it does not exist; whether it did.
    pub fn create(&self, key: &str, value: &[u8], lease: i64) -> io::Result<bool> {
        let txn = json!({
            "compare": [{
                "key": encode(key.as_bytes()),
                "result": "EQUAL",
                "target": "CREATE",
                "create_revision": "0",
            }],
            "success": [{ "request_put": {
                "key": encode(key.as_bytes()),
                "value": encode(value),
                "lease": lease.to_string(),
            }}],
        });
        Ok(self.call("/v3/kv/txn", &txn)?["succeeded"] == json!(true))
    }

    /// Puts `value` under `key` if `guard` holds `expected`; whether it did.
    pub fn put_if(
        &self,
        guard: &str,
        expected: &[u8],
        key: &str,
        value: &[u8],
    ) -> io::Result<bool> {
        let txn = json!({
            "compare": [{
                "key": encode(guard.as_bytes()),
                "result": "EQUAL",
                "target": "VALUE",
                "value": encode(expected),
            }],
            "success": [{ "request_put": { "key": encode(key.as_bytes()), "value": encode(value) }}],
        });
        Ok(self.call("/v3/kv/txn", &txn)?["succeeded"] == json!(true))
    }

    /// What `key` holds, if it exists.
    pub fn get(&self, key: &str) -> io::Result<Option<Vec<u8>>> {
        let reply = self.call("/v3/kv/range", &json!({ "key": encode(key.as_bytes()) }))?;
        match reply["kvs"].get(0) {
            None => Ok(None),
            Some(kv) => {
                let value = kv["value"].as_str().unwrap_or("");
                decode(value)
                    .map(Some)
                    .ok_or_else(|| invalid("a value that is not base64"))
            }
        }
    }

    /// One POST of `body` to `path`; the reply's JSON (a streamed reply's first message).
    fn call(&self, path: &str, body: &Value) -> io::Result<Value> {
        let body = body.to_string();
        let mut stream = TcpStream::connect_timeout(&self.addr, CALL_TIMEOUT)?;
        stream.set_read_timeout(Some(CALL_TIMEOUT))?;
        stream.set_write_timeout(Some(CALL_TIMEOUT))?;
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.host,
            body.len()
        );
        stream.write_all(request.as_bytes())?;
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply)?;
        let text = String::from_utf8_lossy(&reply);
        let (head, body) = text
            .split_once("\r\n\r\n")
            .ok_or_else(|| invalid("an HTTP reply without a body"))?;
        let status = head.lines().next().unwrap_or("");
        if !status.contains(" 200 ") {
            return Err(io::Error::other(format!("etcd answered {status}: {body}")));
        }
        let chunked = head
            .lines()
            .any(|l| l.eq_ignore_ascii_case("transfer-encoding: chunked"));
        let body = if chunked {
            dechunk(body)
        } else {
            body.to_string()
        };
        let first = body.trim_start().lines().next().unwrap_or("");
        serde_json::from_str(first).map_err(|e| invalid(&format!("etcd's reply: {e}")))
    }
}

/// A chunked HTTP body's content.
fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || after.len() < size {
            break;
        }
        out.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    out
}

/// A JSON number etcd writes as a string.
fn int(value: &Value) -> Option<i64> {
    value.as_str()?.parse().ok()
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64, padded.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// [`encode`]'s inverse; None for text that is not base64.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut n, mut bits) = (0u32, 0);
    for c in text.bytes() {
        let v = ALPHABET.iter().position(|&a| a == c)? as u32;
        n = n << 6 | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((n >> bits) as u8);
            n &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// This coordinator's hold on the leader key.
#[derive(Clone, Debug)]
pub struct Leadership {
    etcd: Etcd,
    name: String,
    lease: i64,
}

impl Leadership {
    /// Tries once to become the leader under a lease of `ttl` seconds; None while another
    /// leads.
    pub fn campaign(etcd: &Etcd, name: &str, ttl: u64) -> io::Result<Option<Leadership>> {
        let lease = etcd.grant(ttl)?;
        if etcd.create(LEADER_KEY, name.as_bytes(), lease)? {
            return Ok(Some(Leadership {
                etcd: etcd.clone(),
                name: name.to_string(),
                lease,
            }));
        }
        Ok(None)
    }

    /// Renews the lead; Ok(false) once it is lost for good.
    pub fn renew(&self) -> io::Result<bool> {
        self.etcd.keep_alive(self.lease)
    }

    /// The state the last leader saved, if any.
    pub fn load(&self) -> Result<Option<SavedState>, String> {
        let Some(text) = self
            .etcd
            .get(STATE_KEY)
            .map_err(|e| format!("reading the state from etcd: {e}"))?
        else {
            return Ok(None);
        };
        let state: SavedState = serde_json::from_slice(&text)
            .map_err(|e| format!("etcd's {STATE_KEY} is not a coordinator state: {e}"))?;
        state
            .configuration
            .check()
            .map_err(|e| format!("etcd's {STATE_KEY}: {e}"))?;
        Ok(Some(state))
    }

    /// Saves `state`, if this coordinator still leads.
    pub fn save(&self, state: &SavedState) -> io::Result<()> {
        let text = serde_json::to_vec(state).map_err(io::Error::other)?;
        if self
            .etcd
            .put_if(LEADER_KEY, self.name.as_bytes(), STATE_KEY, &text)?
        {
            Ok(())
        } else {
            Err(io::Error::other(
                "this coordinator no longer leads: another holds the leader key",
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trips_every_length() {
        assert_eq!(encode(b""), "");
        assert_eq!(encode(b"f"), "Zg==");
        assert_eq!(encode(b"fo"), "Zm8=");
        assert_eq!(encode(b"foo"), "Zm9v");
        assert_eq!(encode(b"leader"), "bGVhZGVy");
        for len in 0..40 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            assert_eq!(decode(&encode(&bytes)).unwrap(), bytes);
        }
        assert_eq!(decode("not base64!"), None);
    }

    #[test]
    fn chunked_bodies_are_joined() {
        assert_eq!(
            dechunk("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"),
            "hello world"
        );
        assert_eq!(dechunk("zz\r\n"), "");
    }

    #[test]
    fn urls_are_http_host_and_port() {
        assert!(Etcd::new("http://127.0.0.1:2379").is_ok());
        assert!(Etcd::new("https://127.0.0.1:2379").is_err());
        assert!(Etcd::new("127.0.0.1:2379").is_err());
    }
}
