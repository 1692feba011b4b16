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
//! grants nothing it should not, and a grant names the incarnation of the CMI whose clock it was
//! read from (a restarted process's clock starts again). A restarted CMI holds no lease until the
//! coordinator grants one, which it does only after telling it the current configuration's ids.
//! The fence is judged by the time a command runs (the server reads the clock for it).
//!
//! **Sessions' configurations.** A client routes keys by the configuration it last fetched; a
//! session says which (`LCONFIG`). A session of another configuration than the CMI's latest is
//! refused and ended, whenever the difference shows: an older one (STALECONFIG) may have written
//! where the newer configuration no longer looks (the secondary of a fragment whose primary has
//! come back), so its client fetches the configuration and runs it again by the new routes; a
//! newer one (FENCED) means this CMI was not told of it, since the coordinator tells every
//! instance that may serve a new id before any client can learn it: it restarted (a volatile one
//! comes back without fragments or ids), or the coordinator could not reach it.
//!
//! Without fragments (no Gemini configuration) neither fence applies.

use cads_protocol::spec::Group;
use cads_protocol::{Command, ErrorReply, SessionId};

use std::cmp::Ordering;

use crate::lease::{EndCause, SESSION_OVERHEAD};
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

    /// This process's incarnation of the CMI, which a grant names (0 unless the server sets it).
    pub fn boot_id(&self) -> u64 {
        self.boot_id
    }

    /// Sets the incarnation (the server, once at start: a number no earlier start used).
    pub fn set_boot_id(&mut self, id: u64) {
        self.boot_id = id;
    }

    /// INSTANCELEASE: `[now, until, boot]` (the monotonic clock, the lease's end on it, the
    /// incarnation), or with `until`, sets the end; a grant naming another incarnation (read
    /// from a process that has restarted since) is refused.
    pub(crate) fn instance_lease(
        &mut self,
        until: Option<u64>,
        boot: Option<u64>,
        now: Now,
    ) -> Result<cads_protocol::Reply<'static>, ErrorReply> {
        use cads_protocol::Reply;
        match until {
            Some(_) if boot.is_some_and(|b| b != self.boot_id) => Err(ErrorReply::err(
                "the lease is for another incarnation of this instance: it restarted since its \
                 clock was read",
            )),
            Some(until) => {
                self.instance_lease_until = until;
                Ok(Reply::OK)
            }
            None => Ok(Reply::Array(vec![
                Reply::Int(now.mono_ms as i64),
                Reply::Int(self.instance_lease_until as i64),
                Reply::Int(self.boot_id as i64),
            ])),
        }
    }

    /// LCONFIG: session `sid` routes by configuration `id`; the session is opened if the CMI does
    /// not know it yet. A configuration other than the CMI's latest ends the session (see
    /// [`Engine::fence_refusal`]): an older one is STALECONFIG; a newer one, which the
    /// coordinator tells every instance that serves before any client can learn it, means this
    /// CMI was not told (it restarted, or the coordinator could not reach it), and is FENCED.
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
        session.config = Some(id);
        match self.config_refusal(id) {
            Some(refusal) => {
                self.end_session(sid, EndCause::Fenced, now);
                Err(refusal)
            }
            None => Ok(()),
        }
    }

    /// Why a session routed by configuration `id` may not run here.
    fn config_refusal(&self, id: u64) -> Option<ErrorReply> {
        let latest = self.configuration_id();
        match id.cmp(&latest) {
            Ordering::Less => Some(ErrorReply::stale_config(latest, id)),
            Ordering::Greater => Some(ErrorReply::behind_config(latest, id)),
            Ordering::Equal => None,
        }
    }

    /// Why `cmd` may not run at `now`, if a fence stops it. A session refused is ended as if its
    /// leases had run out (its commit will not come here, and its data-store write may have
    /// happened): the keys it held exclusively go, so the instance never serves a value that
    /// write replaced, even once it serves again. Its later commands find it aborted.
    pub(crate) fn fence_refusal(&mut self, cmd: &Command<'_>, now: Now) -> Option<ErrorReply> {
        // A CMI is told configurations only with its fragments: without them, the only check is
        // LCONFIG's own.
        if self.fragments() == 0 || matches!(cmd, Command::LAbort(_) | Command::Time) {
            return None;
        }
        let serves_keys = matches!(cmd.spec().group, Group::Plain | Group::Session | Group::Iq);
        let refusal = if serves_keys && self.fenced(now) {
            Some(ErrorReply::fenced())
        } else if matches!(cmd, Command::LConfig { .. }) {
            None
        } else {
            let config = self.sessions.get(&cmd.session_id()?)?.config?;
            self.config_refusal(config)
        };
        if let (Some(_), Some(sid)) = (&refusal, cmd.session_id()) {
            self.end_session(sid, EndCause::Fenced, now);
        }
        refusal
    }
}
