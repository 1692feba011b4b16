//! What a CMI says about itself: its INFO reply, read into typed fields ([`CmiStats`]), so that
//! callers (the framework's pinned-memory check, benchmarks, operators' tools) never search the
//! text themselves.

use std::collections::BTreeMap;

use cads_protocol::{Command, Reply};

use crate::error::Result;
use crate::session::{error_from, unexpected};
use crate::Client;

/// One CMI's INFO (every section), as numbers and names. Fields a CMI does not report (an older
/// server, or a plain Redis) read as 0 or empty; [`CmiStats::fields`] keeps every `name:value`
/// line as sent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CmiStats {
    /// The lease mode the CMI runs in (`write-around` or `write-through`); empty if not reported.
    pub mode: String,
    /// Bytes used by entries, pending versions and markers.
    pub used_memory: u64,
    /// Of those, pinned bytes (buffered writes, PendingWrites, queues, markers).
    pub used_memory_pinned: u64,
    /// The memory limit (`maxmemory`).
    pub maxmemory: u64,
    /// The pinned-memory limit (`max-pinned-memory`).
    pub max_pinned_memory: u64,
    /// Reads that found their key (every read command, leases' included).
    pub keyspace_hits: u64,
    /// Reads that did not.
    pub keyspace_misses: u64,
    /// Entries evicted to make room.
    pub evicted_keys: u64,
    /// Entries discarded as obsolete by their fragment's configuration id (Gemini).
    pub discarded_keys: u64,
    /// Commands run since the CMI started.
    pub total_commands_processed: u64,
    /// Leases granted.
    pub leases_granted: u64,
    /// Leases voided by a conflicting request.
    pub leases_voided: u64,
    /// Leases that expired.
    pub leases_expired: u64,
    /// Sessions committed.
    pub sessions_committed: u64,
    /// Sessions aborted (by the client, a conflict, a wound or expiry).
    pub sessions_aborted: u64,
    /// Of those, sessions that asked for a lease they could not have and gave way.
    pub sessions_conflicted: u64,
    /// Of those, sessions whose shared lease a writer voided.
    pub sessions_wounded: u64,
    /// Of those, sessions whose leases ran out.
    pub sessions_expired: u64,
    /// Lease requests that met another session's lease.
    pub lease_conflicts: u64,
    /// RETRY replies to ticketed sessions waiting for a key instead of giving way.
    pub lease_waits: u64,
    /// The keys most contended for, as INFO shows them (non-printable bytes as `\xNN`), with
    /// their conflict counts, most contended first.
    pub contended_keys: Vec<(String, u64)>,
    /// Every `name:value` line of the reply.
    pub fields: BTreeMap<String, String>,
}

impl CmiStats {
    /// Reads an INFO text (Redis's layout: `# Section` headers and `name:value` lines).
    pub fn parse(text: &str) -> CmiStats {
        let fields: BTreeMap<String, String> = text
            .lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| {
                let (name, value) = line.split_once(':')?;
                Some((name.trim().to_string(), value.trim().to_string()))
            })
            .collect();
        let number = |name: &str| {
            fields
                .get(name)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        CmiStats {
            mode: fields.get("mode").cloned().unwrap_or_default(),
            used_memory: number("used_memory"),
            used_memory_pinned: number("used_memory_pinned"),
            maxmemory: number("maxmemory"),
            max_pinned_memory: number("max_pinned_memory"),
            keyspace_hits: number("keyspace_hits"),
            keyspace_misses: number("keyspace_misses"),
            evicted_keys: number("evicted_keys"),
            discarded_keys: number("discarded_keys"),
            total_commands_processed: number("total_commands_processed"),
            leases_granted: number("leases_granted"),
            leases_voided: number("leases_voided"),
            leases_expired: number("leases_expired"),
            sessions_committed: number("sessions_committed"),
            sessions_aborted: number("sessions_aborted"),
            sessions_conflicted: number("sessions_conflicted"),
            sessions_wounded: number("sessions_wounded"),
            sessions_expired: number("sessions_expired"),
            lease_conflicts: number("lease_conflicts"),
            lease_waits: number("lease_waits"),
            contended_keys: contended_keys(&fields),
            fields,
        }
    }
}

/// The `contended_key_N:key=K,conflicts=C` lines, in the order of N.
fn contended_keys(fields: &BTreeMap<String, String>) -> Vec<(String, u64)> {
    let mut keys: Vec<(u64, String, u64)> = fields
        .iter()
        .filter_map(|(name, value)| {
            let rank = name.strip_prefix("contended_key_")?.parse().ok()?;
            let (key, conflicts) = value.strip_prefix("key=")?.rsplit_once(",conflicts=")?;
            Some((rank, key.to_string(), conflicts.parse().ok()?))
        })
        .collect();
    keys.sort();
    keys.into_iter().map(|(_, key, n)| (key, n)).collect()
}

impl Client {
    /// INFO of CMI `cmi`, every section.
    pub fn info(&self, cmi: usize) -> Result<CmiStats> {
        match self.execute(cmi, &Command::Info(&[]))? {
            Reply::Bulk(text) => Ok(CmiStats::parse(&String::from_utf8_lossy(&text))),
            Reply::Error(e) => Err(error_from(e)),
            other => Err(unexpected(&other)),
        }
    }

    /// Plain GETs of `keys` (no leases), in one round trip: one MGET per CMI, all sent before any
    /// reply is read. Returns the values in the order of `keys`.
    pub fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let mut by_cmi: Vec<Vec<usize>> = vec![Vec::new(); self.cmis()];
        for (i, key) in keys.iter().enumerate() {
            by_cmi[self.route(key)].push(i);
        }
        let groups: Vec<(usize, Vec<&[u8]>)> = by_cmi
            .iter()
            .enumerate()
            .filter(|(_, indexes)| !indexes.is_empty())
            .map(|(cmi, indexes)| (cmi, indexes.iter().map(|&i| keys[i]).collect()))
            .collect();
        let commands: Vec<(usize, Command<'_>)> = groups
            .iter()
            .map(|(cmi, ks)| (*cmi, Command::MGet(ks)))
            .collect();
        let mut values = vec![None; keys.len()];
        for (reply, (cmi, _)) in self.execute_many(&commands).into_iter().zip(&groups) {
            let items = match reply? {
                Reply::Array(items) if items.len() == by_cmi[*cmi].len() => items,
                Reply::Error(e) => return Err(error_from(e)),
                other => return Err(unexpected(&other)),
            };
            for (item, &i) in items.into_iter().zip(&by_cmi[*cmi]) {
                values[i] = match item {
                    Reply::Bulk(b) => Some(b.into_owned()),
                    Reply::Nil => None,
                    other => return Err(unexpected(&other)),
                };
            }
        }
        Ok(values)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_text_is_read_into_fields() {
        let text = "# Server\r\nmode:write-through\r\ncmi_index:0\r\n\r\n# Memory\r\n\
                    used_memory:1000\r\nused_memory_pinned:250\r\nmaxmemory_human:1.0G\r\n\r\n\
                    # Stats\r\nkeyspace_hits:7\r\nkeyspace_misses:3\r\n";
        let stats = CmiStats::parse(text);
        assert_eq!(stats.mode, "write-through");
        assert_eq!((stats.used_memory, stats.used_memory_pinned), (1000, 250));
        assert_eq!((stats.keyspace_hits, stats.keyspace_misses), (7, 3));
        assert_eq!(stats.maxmemory, 0, "not reported: 0");
        assert_eq!(stats.fields["maxmemory_human"], "1.0G");
        assert_eq!(CmiStats::parse("").mode, "");
        let text = "# Contention\r\nlease_waits:4\r\ncontended_key_2:key=b,conflicts=3\r\n\
                    contended_key_1:key=a\\x2cb,conflicts=9\r\n";
        let stats = CmiStats::parse(text);
        assert_eq!(stats.lease_waits, 4);
        assert_eq!(
            stats.contended_keys,
            vec![("a\\x2cb".to_string(), 9), ("b".to_string(), 3)]
        );
    }
}
