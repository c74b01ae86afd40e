//! The memory a map lives in, and word-sized atomic access to it.
//!
//! Map memory is shared with other threads, other processes and the GPU, so this crate never
//! makes a Rust reference to it other than to atomics: every read and write is an atomic load or
//! store of an aligned 8-byte (or 4-byte) word. Keys and values are padded to whole words by the
//! layout, so copying them word by word is exact.

use std::ffi::CString;
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::MapError;
use crate::layout::{Geometry, HEADER_BYTES, MAGIC};

/// Where a map's memory comes from.
#[derive(Debug)]
enum Backing {
    /// Anonymous memory of this process, unmapped on drop.
    Anonymous,
    /// A POSIX shared-memory object; its name is unlinked on drop when this process created it.
    Shared { name: CString, owner: bool },
    /// Memory owned by someone else.
    External,
}

/// A block of map memory: 8-byte aligned, with a checked header.
#[derive(Debug)]
pub(crate) struct Region {
    ptr: NonNull<u8>,
    len: usize,
    mapped: bool,
    backing: Backing,
}

// SAFETY: the region is only ever accessed through atomics (see the module docs), so sharing it
// between threads is sound; the pointer itself is owned for the region's life.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Drop for Region {
    fn drop(&mut self) {
        if self.mapped {
            // SAFETY: `ptr`/`len` are exactly what mmap returned, unmapped once, here.
            unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
        }
        if let Backing::Shared { name, owner: true } = &self.backing {
            // SAFETY: `name` is a valid NUL-terminated string.
            unsafe { libc::shm_unlink(name.as_ptr()) };
        }
    }
}

fn io_error(op: &'static str, name: &str) -> MapError {
    MapError::Io { op, name: name.to_owned(), source: io::Error::last_os_error() }
}

/// Maps `len` bytes of `fd` (or anonymous memory when `fd` is -1).
fn mmap(fd: libc::c_int, len: usize, name: &str) -> Result<NonNull<u8>, MapError> {
    let flags = if fd < 0 { libc::MAP_PRIVATE | libc::MAP_ANONYMOUS } else { libc::MAP_SHARED };
    // SAFETY: a fresh mapping chosen by the kernel; no existing memory is affected.
    let p = unsafe {
        libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, fd, 0)
    };
    if p == libc::MAP_FAILED {
        return Err(io_error("mmap", name));
    }
    Ok(NonNull::new(p.cast()).expect("mmap never returns null on success"))
}

/// The shared-memory object name for a map name: `/` and the name, which must be a valid file
/// name (no `/`, not `.` or `..`, at most 200 bytes, no NUL).
pub(crate) fn shm_name(name: &str) -> Result<CString, MapError> {
    let bad = |reason: &str| MapError::Name { name: name.to_owned(), reason: reason.to_owned() };
    if name.is_empty() || name.len() > 200 {
        return Err(bad("a name has 1 to 200 bytes"));
    }
    if name.contains('/') || name == "." || name == ".." {
        return Err(bad("a name cannot contain `/` or be `.` or `..`"));
    }
    CString::new(format!("/{name}")).map_err(|_| bad("a name cannot contain NUL"))
}

impl Region {
    /// Fresh, zeroed process memory holding an empty map of `geometry`.
    pub(crate) fn anonymous(geometry: &Geometry) -> Result<Region, MapError> {
        let len = geometry.total_bytes as usize;
        let ptr = mmap(-1, len, "(process memory)")?;
        let region = Region { ptr, len, mapped: true, backing: Backing::Anonymous };
        region.write_header(geometry);
        Ok(region)
    }

    /// A new shared-memory object `name`, readable and writable by this user only, holding an
    /// empty map of `geometry`. Fails if the name exists.
    pub(crate) fn create_shared(name: &str, geometry: &Geometry) -> Result<Region, MapError> {
        let c_name = shm_name(name)?;
        let len = geometry.total_bytes as usize;
        // SAFETY: `c_name` is a valid C string; O_EXCL never opens an existing object.
        let fd = unsafe {
            libc::shm_open(c_name.as_ptr(), libc::O_CREAT | libc::O_EXCL | libc::O_RDWR, 0o600)
        };
        if fd < 0 {
            return Err(io_error("shm_open", name));
        }
        let fd = Fd(fd);
        // From here on the object exists: unlink it again if anything fails.
        let fail = |e: MapError| {
            // SAFETY: valid C string.
            unsafe { libc::shm_unlink(c_name.as_ptr()) };
            e
        };
        // SAFETY: `fd` is an open descriptor we own.
        if unsafe { libc::ftruncate(fd.0, len as libc::off_t) } != 0 {
            return Err(fail(io_error("ftruncate", name)));
        }
        let ptr = mmap(fd.0, len, name).map_err(fail)?;
        let region = Region {
            ptr,
            len,
            mapped: true,
            backing: Backing::Shared { name: c_name, owner: true },
        };
        region.write_header(geometry);
        Ok(region)
    }

    /// Opens the shared-memory object `name` and checks its header. The object must belong to
    /// this user and be closed to everyone else.
    pub(crate) fn open_shared(name: &str) -> Result<(Region, Geometry), MapError> {
        let c_name = shm_name(name)?;
        // SAFETY: `c_name` is a valid C string.
        let fd = unsafe { libc::shm_open(c_name.as_ptr(), libc::O_RDWR, 0) };
        if fd < 0 {
            return Err(io_error("shm_open", name));
        }
        let fd = Fd(fd);
        // SAFETY: an all-zero `stat` is a valid value to be overwritten.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is open and `st` is writable.
        if unsafe { libc::fstat(fd.0, &mut st) } != 0 {
            return Err(io_error("fstat", name));
        }
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        if st.st_uid != uid {
            return Err(MapError::Permissions {
                name: name.to_owned(),
                reason: format!("it belongs to user {}, not to this user ({uid})", st.st_uid),
            });
        }
        if st.st_mode & 0o077 != 0 {
            return Err(MapError::Permissions {
                name: name.to_owned(),
                reason: format!("its mode {:o} lets other users in", st.st_mode & 0o777),
            });
        }
        let len = usize::try_from(st.st_size).unwrap_or(0);
        if len == 0 {
            return Err(MapError::NotReady { name: name.to_owned() });
        }
        if len < HEADER_BYTES {
            return Err(MapError::TooShort { len, need: HEADER_BYTES as u64 });
        }
        let ptr = mmap(fd.0, len, name)?;
        let region = Region {
            ptr,
            len,
            mapped: true,
            backing: Backing::Shared { name: c_name, owner: false },
        };
        if region.word(0).load(Ordering::Acquire) == 0 {
            // The creator writes the magic last.
            return Err(MapError::NotReady { name: name.to_owned() });
        }
        let geometry = region.check_header()?;
        Ok((region, geometry))
    }

    /// Memory given by the caller. With `format`, an empty map of `geometry` is written there;
    /// without, the header found there is checked instead.
    ///
    /// # Safety
    /// `ptr` must be valid for reads and writes of `len` bytes, 8-byte aligned, for as long as
    /// the map (and every clone of it) lives, and accessed by others only through the layout's
    /// atomic protocol. With `format`, its first `total_bytes` bytes are zeroed here.
    pub(crate) unsafe fn external(
        ptr: NonNull<u8>,
        len: usize,
        format: Option<&Geometry>,
    ) -> Result<(Region, Geometry), MapError> {
        if !(ptr.as_ptr() as usize).is_multiple_of(8) {
            return Err(MapError::Geometry { reason: "map memory must be 8-byte aligned".into() });
        }
        let region = Region { ptr, len, mapped: false, backing: Backing::External };
        match format {
            Some(g) => {
                if (len as u64) < g.total_bytes {
                    return Err(MapError::TooShort { len, need: g.total_bytes });
                }
                for off in (0..g.total_bytes as usize).step_by(8) {
                    region.word(off).store(0, Ordering::Relaxed);
                }
                region.write_header(g);
                Ok((region, *g))
            }
            None => {
                let g = region.check_header()?;
                Ok((region, g))
            }
        }
    }

    /// Writes the header of `geometry`, the magic last (with release ordering), so a reader that
    /// sees the magic sees the rest.
    fn write_header(&self, geometry: &Geometry) {
        let bytes = geometry.header_bytes(current_pid());
        for (i, chunk) in bytes.chunks(8).enumerate().skip(1) {
            self.word(i * 8)
                .store(u64::from_le_bytes(chunk.try_into().unwrap()), Ordering::Relaxed);
        }
        self.word(0).store(u64::from_le_bytes(MAGIC), Ordering::Release);
    }

    /// Reads the header and checks it against the region's length.
    fn check_header(&self) -> Result<Geometry, MapError> {
        if self.len < HEADER_BYTES {
            return Err(MapError::TooShort { len: self.len, need: HEADER_BYTES as u64 });
        }
        let mut bytes = [0u8; HEADER_BYTES];
        bytes[..8].copy_from_slice(&self.word(0).load(Ordering::Acquire).to_le_bytes());
        for i in 1..HEADER_BYTES / 8 {
            bytes[i * 8..i * 8 + 8]
                .copy_from_slice(&self.word(i * 8).load(Ordering::Relaxed).to_le_bytes());
        }
        Geometry::from_header(&bytes, self.len)
    }

    /// The first byte.
    pub(crate) fn base(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The name of the shared-memory object, if the map lives in one.
    pub(crate) fn shared_name(&self) -> Option<&str> {
        match &self.backing {
            Backing::Shared { name, .. } => name.to_str().ok().map(|n| &n[1..]),
            _ => None,
        }
    }

    /// The 8-byte word at byte offset `off`.
    #[inline]
    pub(crate) fn word(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off.is_multiple_of(8) && off + 8 <= self.len);
        // SAFETY: offsets come from the checked geometry, which lies inside the region (its
        // total size was checked against `len`); the region is 8-byte aligned and every access
        // to it is atomic.
        unsafe { AtomicU64::from_ptr(self.ptr.as_ptr().add(off).cast()) }
    }

    /// The 4-byte word at byte offset `off`.
    #[inline]
    pub(crate) fn word32(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off.is_multiple_of(4) && off + 4 <= self.len);
        // SAFETY: as for `word`.
        unsafe { AtomicU32::from_ptr(self.ptr.as_ptr().add(off).cast()) }
    }

    /// Copies `out.len()` bytes from offset `off` (word-aligned) out, word by word.
    #[inline]
    pub(crate) fn read_bytes(&self, off: usize, out: &mut [u8]) {
        let mut chunks = out.chunks_exact_mut(8);
        let mut at = off;
        for chunk in &mut chunks {
            chunk.copy_from_slice(&self.word(at).load(Ordering::Relaxed).to_le_bytes());
            at += 8;
        }
        let rest = chunks.into_remainder();
        if !rest.is_empty() {
            let w = self.word(at).load(Ordering::Relaxed).to_le_bytes();
            rest.copy_from_slice(&w[..rest.len()]);
        }
    }

    /// Copies `bytes` to offset `off` (word-aligned), word by word; the padding of the last word
    /// is written as zeros.
    #[inline]
    pub(crate) fn write_bytes(&self, off: usize, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        let mut at = off;
        for chunk in &mut chunks {
            self.word(at).store(u64::from_le_bytes(chunk.try_into().unwrap()), Ordering::Relaxed);
            at += 8;
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.word(at).store(u64::from_le_bytes(w), Ordering::Relaxed);
        }
    }

    /// Whether the `len` bytes at `off` equal `bytes` (padding ignored).
    #[inline]
    pub(crate) fn bytes_equal(&self, off: usize, bytes: &[u8]) -> bool {
        let mut chunks = bytes.chunks_exact(8);
        let mut at = off;
        for chunk in &mut chunks {
            if self.word(at).load(Ordering::Relaxed)
                != u64::from_le_bytes(chunk.try_into().unwrap())
            {
                return false;
            }
            at += 8;
        }
        let rest = chunks.remainder();
        rest.is_empty()
            || self.word(at).load(Ordering::Relaxed).to_le_bytes()[..rest.len()] == *rest
    }
}

/// A file descriptor closed on drop.
struct Fd(libc::c_int);

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: the descriptor is open and owned here.
        unsafe { libc::close(self.0) };
    }
}

/// Removes the shared-memory object `name`, if it exists (for a map whose creator died).
pub fn unlink_shared(name: &str) -> Result<(), MapError> {
    let c_name = shm_name(name)?;
    // SAFETY: valid C string.
    if unsafe { libc::shm_unlink(c_name.as_ptr()) } != 0 {
        return Err(io_error("shm_unlink", name));
    }
    Ok(())
}

/// This process's id, cached (`getpid` is a system call, and writers record their id in the
/// words they claim). A child made by `fork` resets the cache through a `pthread_atfork`
/// handler.
pub(crate) fn current_pid() -> u32 {
    static PID: AtomicU32 = AtomicU32::new(0);
    static REGISTER: std::sync::Once = std::sync::Once::new();
    extern "C" fn forked() {
        PID.store(0, Ordering::Relaxed);
    }
    REGISTER.call_once(|| {
        // SAFETY: registers a handler that only stores to an atomic, which is async-signal-safe
        // as the child side of `fork` requires.
        unsafe { libc::pthread_atfork(None, None, Some(forked)) };
    });
    match PID.load(Ordering::Relaxed) {
        0 => {
            let pid = std::process::id();
            PID.store(pid, Ordering::Relaxed);
            pid
        }
        pid => pid,
    }
}

/// Whether process `pid` may still be running: false only when the kernel says it does not
/// exist.
pub(crate) fn process_alive(pid: u32) -> bool {
    if pid == current_pid() {
        return true;
    }
    let Ok(pid) = libc::pid_t::try_from(pid) else { return false };
    // SAFETY: signal 0 only checks for existence; nothing is delivered.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}
