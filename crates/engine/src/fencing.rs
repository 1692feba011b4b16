//! Gemini's fences (004 §2.1, §3.2.4): when a CMI of a Gemini configuration may serve keys, and
//! which sessions it may serve.
//!
//! **The instance lease.** The coordinator moves a failed instance's fragments to others once it
//! takes the instance for failed; an instance that is only cut off from the coordinator must have
//! stopped serving by then, or a client that still reaches it would read what others overwrote.
//! So a CMI whose key space is split into fragments serves keys only while a lease from the
//! coordinator runs. The lease is set on the CMI's own monotonic clock: the coordinator reads the
//! clock (`INSTANCELEASE`), then sets the end to what it read plus the lease's length
//! (`INSTANCELEASE until`). The read happened before the coordinator got its answer, so the
//! coordinator knows the lease ends no later than that answer's arrival plus the length, on any
//! clock running at the same rate; a grant that arrives late (a frozen process, a slow network)
//! grants nothing it should not. A restarted CMI holds no lease until the coordinator grants one,
//! which it does only after telling the CMI the current configuration's ids.
//!
//! **Sessions' configurations.** A client routes keys by the configuration it last fetched; a
//! session says which (`LCONFIG`). Once the CMI knows a newer configuration, every command of such a
//! session but LABORT is refused with STALECONFIG: the session may have written where the newer
//! configuration no longer looks (the secondary of a fragment whose primary has come back), so its
//! client fetches the configuration and runs it again by the new routes. The coordinator tells
//! every instance that may serve a new id before any client can learn it.
//!
//! Without fragments (no Gemini configuration) neither fence applies.

use cads_protocol::spec::Group;
use cads_protocol::{Command, ErrorReply, SessionId};

use crate::lease::SESSION_OVERHEAD;
use crate::{Engine, Now};

impl Engine {
    /// Whether the CMI may serve keys at `now`.
    pub fn fenced(&self, now: Now) -> bool {
        self.fragments() > 0 && now.mono_ms >= self.instance_lease_until
    }

    /// When the lease from the coordinator ends (monotonic ms; 0 if none was granted).
    pub fn instance_lease_until(&self) -> u64 {
        self.instance_lease_until
    }

    /// INSTANCELEASE: `[now, until]` on the CMI's monotonic clock, or with `until`, sets the end.
    pub(crate) fn instance_lease(
        &mut self,
        until: Option<u64>,
        now: Now,
    ) -> cads_protocol::Reply<'static> {
        use cads_protocol::Reply;
        match until {
            Some(until) => {
                self.instance_lease_until = until;
                Reply::OK
            }
            None => Reply::Array(vec![
                Reply::Int(now.mono_ms as i64),
                Reply::Int(self.instance_lease_until as i64),
            ]),
        }
    }

    /// LCONFIG: session `sid` routes by configuration `id`; the session is opened if the CMI does
    /// not know it yet. Refused (and every later command of the session) if the CMI knows a newer
    /// configuration.
    pub(crate) fn set_session_config(
        &mut self,
        sid: SessionId,
        id: u64,
        now: Now,
    ) -> Result<(), ErrorReply> {
        if !self.sessions.contains_key(&sid) {
            self.session_room(SESSION_OVERHEAD)?;
            self.open_session_with(sid, None, now);
        }
        let session = self.sessions.get_mut(&sid).expect("opened");
        if session.state == crate::SessionState::Aborted {
            return Err(ErrorReply::abort());
        }
        // Kept even when stale, so that the commands pipelined after this one are refused too.
        session.config = Some(id);
        let latest = self.configuration_id();
        if id < latest {
            return Err(ErrorReply::stale_config(latest, id));
        }
        Ok(())
    }

    /// Why `cmd` may not run at `now`, if a fence stops it.
    pub(crate) fn fence_refusal(&self, cmd: &Command<'_>, now: Now) -> Option<ErrorReply> {
        if self.fragments() == 0 || matches!(cmd, Command::LAbort(_) | Command::Time) {
            return None;
        }
        let serves_keys = matches!(cmd.spec().group, Group::Plain | Group::Session | Group::Iq);
        if serves_keys && self.fenced(now) {
            return Some(ErrorReply::fenced());
        }
        if matches!(cmd, Command::LConfig { .. }) {
            return None;
        }
        let config = self.sessions.get(&cmd.session_id()?)?.config?;
        let latest = self.configuration_id();
        (config < latest).then(|| ErrorReply::stale_config(latest, config))
    }
}
