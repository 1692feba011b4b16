//! Thin, safe wrappers over the Linux syscalls the event loop needs and std does not offer: epoll.
//!
//! Socket I/O itself goes through `std::net` (`recv` for reads, `send(MSG_NOSIGNAL)` for writes,
//! `accept4(SOCK_CLOEXEC)` for accepts), which issues exactly one syscall per call, so this is the
//! only module with `unsafe`.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

pub(crate) use libc::epoll_event as Event;

/// Readable (or the peer half-closed).
pub(crate) const EPOLLIN: u32 = libc::EPOLLIN as u32;
/// Writable.
pub(crate) const EPOLLOUT: u32 = libc::EPOLLOUT as u32;
/// Error on the socket; always reported, whatever the interest.
pub(crate) const EPOLLERR: u32 = libc::EPOLLERR as u32;
/// Both directions are shut (or the peer reset); always reported, whatever the interest.
pub(crate) const EPOLLHUP: u32 = libc::EPOLLHUP as u32;

/// An epoll instance, used level-triggered: an fd with unread input (or, with `EPOLLOUT`, free
/// send-buffer space) is reported by every `wait` until that changes, like Redis's `ae_epoll.c`.
#[derive(Debug)]
pub(crate) struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    pub(crate) fn new() -> io::Result<Epoll> {
        // SAFETY: epoll_create1 takes no pointers; a non-negative result is a fresh fd we own.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by the kernel and nothing else owns it.
        Ok(Epoll {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    pub(crate) fn add(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, events, token)
    }

    pub(crate) fn modify(&self, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, events, token)
    }

    fn ctl(&self, op: libc::c_int, fd: RawFd, events: u32, token: u64) -> io::Result<()> {
        let mut event = Event { events, u64: token };
        // SAFETY: `event` is a valid epoll_event that lives across the call; the kernel copies it.
        // A bad `fd` is reported as an error, not undefined behaviour.
        let rc = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut event) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Waits up to `timeout_ms` (-1: forever, 0: poll) for events and returns those that fired, a
    /// prefix of `events`. An interrupted wait returns no events.
    pub(crate) fn wait<'a>(
        &self,
        events: &'a mut [Event],
        timeout_ms: i32,
    ) -> io::Result<&'a [Event]> {
        let max = events.len().min(libc::c_int::MAX as usize) as libc::c_int;
        // SAFETY: the kernel writes at most `max` entries into `events`, which is valid for writes
        // of that many epoll_event values for the duration of the call.
        let n =
            unsafe { libc::epoll_wait(self.fd.as_raw_fd(), events.as_mut_ptr(), max, timeout_ms) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                return Ok(&events[..0]);
            }
            return Err(err);
        }
        Ok(&events[..n as usize])
    }
}

/// A zeroed event buffer for [`Epoll::wait`].
pub(crate) fn event_buffer(len: usize) -> Vec<Event> {
    vec![Event { events: 0, u64: 0 }; len]
}
