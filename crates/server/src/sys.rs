//! Thin, safe wrappers over the Linux syscalls the event loop needs and std does not offer: epoll,
//! and a listening socket with a backlog of our choosing; and `uname` for INFO.
//!
//! Socket I/O itself goes through `std::net` (`recv` for reads, `send(MSG_NOSIGNAL)` for writes,
//! `accept4(SOCK_CLOEXEC)` for accepts), which issues exactly one syscall per call, so this is the
//! only module with `unsafe`.

use std::io;
use std::net::{SocketAddr, TcpListener};
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

/// Turns a -1 return into the errno as an error.
fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// bind(2) with a `sockaddr_in` or `sockaddr_in6` (`T` must be one of them).
fn bind<T>(fd: &OwnedFd, addr: &T) -> io::Result<()> {
    // SAFETY: `addr` is an initialised socket address of the family the socket was made with,
    // living across the call and passed with its own size; the kernel only reads it.
    check(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (addr as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    })?;
    Ok(())
}

/// A TCP socket listening on `addr` with room for `backlog` connections waiting to be accepted
/// (the kernel caps it at `net.core.somaxconn`). Otherwise as `TcpListener::bind`, which always
/// asks for 128: close-on-exec, `SO_REUSEADDR`.
pub(crate) fn tcp_listen(addr: SocketAddr, backlog: i32) -> io::Result<TcpListener> {
    let domain = match addr {
        SocketAddr::V4(_) => libc::AF_INET,
        SocketAddr::V6(_) => libc::AF_INET6,
    };
    // SAFETY: socket(2) takes no pointers; a non-negative result is a fresh fd we own.
    let fd = check(unsafe { libc::socket(domain, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: `fd` was just returned by the kernel and nothing else owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let one: libc::c_int = 1;
    // SAFETY: the option value points to a c_int that lives across the call, with its size.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_REUSEADDR,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })?;
    match addr {
        SocketAddr::V4(v4) => bind(
            &fd,
            &libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            },
        )?,
        SocketAddr::V6(v6) => bind(
            &fd,
            &libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            },
        )?,
    }
    // SAFETY: listen(2) takes no pointers.
    check(unsafe { libc::listen(fd.as_raw_fd(), backlog) })?;
    Ok(TcpListener::from(fd))
}

/// The kernel's name, release and machine (`Linux 6.1.0-18-amd64 x86_64`), as Redis's INFO shows
/// them in `os`.
pub(crate) fn os_description() -> String {
    // SAFETY: utsname is plain old data; all zeros is a valid value.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: uname writes into the struct we own and reads nothing else.
    if unsafe { libc::uname(&mut u) } != 0 {
        return "unknown".to_string();
    }
    let field = |chars: &[libc::c_char]| {
        let bytes: Vec<u8> = chars
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    format!(
        "{} {} {}",
        field(&u.sysname),
        field(&u.release),
        field(&u.machine)
    )
}
