//! The consumer of the programs' BPF ring buffer, with its data pages mapped once.
//!
//! aya's and libbpf's consumers map the data area twice in a row, so that a record that wraps
//! around its end reads as one slice. Every page of a ring buffer's mapping is resident from
//! the mmap on and counts in the process's RSS: a 16 MiB ring cost 32 MiB of spacetime's own
//! peak RSS. Here the data is mapped once, and the rare record that wraps is copied into a
//! buffer of the consumer's. The protocol is the kernel's (kernel/bpf/ringbuf.c): an 8-byte
//! header (length, busy and discard bits) before each record, positions that only grow, the
//! consumer position written back once a record is used.
//!
//! Memory orderings, paired with the kernel's (kernel/bpf/ringbuf.c):
//! - `__bpf_ringbuf_reserve` writes a record's header (length | BUSY) and then publishes it with
//!   `smp_store_release(&rb->producer_pos, ...)`: our Acquire load of the producer position
//!   makes that header visible before we read it.
//! - `bpf_ringbuf_commit` clears BUSY (or sets DISCARD) with `xchg(&hdr->len, ...)`, a full
//!   barrier after the record's bytes were written: our Acquire load of the header makes the
//!   bytes visible once BUSY is clear.
//! - `__bpf_ringbuf_reserve` reads the consumer position with `smp_load_acquire` before reusing
//!   space: our Release store of it comes after every read of the record it frees.
//!
//! These are the orderings of libbpf's consumer (tools/lib/bpf/ringbuf.c) and aya's.

use std::ops::Deref;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use aya::maps::MapData;

const BUSY: u32 = 1 << 31;
const DISCARD: u32 = 1 << 30;
const HEADER: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum RingError {
    #[error("reading the ring buffer's size: {0}")]
    Info(#[source] aya::maps::MapError),
    #[error("the ring buffer's size {0} is not a power of two")]
    Size(u32),
    #[error("mapping the ring buffer: {0}")]
    Map(#[source] std::io::Error),
}

/// One shared mapping, unmapped when dropped.
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mapping {
    fn new(fd: BorrowedFd<'_>, len: usize, writable: bool, offset: u64) -> std::io::Result<Self> {
        use rustix::mm::{MapFlags, ProtFlags};
        let prot = match writable {
            true => ProtFlags::READ | ProtFlags::WRITE,
            false => ProtFlags::READ,
        };
        // SAFETY: a fresh shared mapping of the map's fd, at an address the kernel picks; it
        // is only reached through this struct, and unmapped once, in Drop.
        let ptr = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                prot,
                MapFlags::SHARED,
                fd,
                offset,
            )
        }?;
        let ptr = NonNull::new(ptr.cast()).ok_or(std::io::ErrorKind::InvalidData)?;
        Ok(Mapping { ptr, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: our own mapping, of this length; nothing borrows it past its owner.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// The consumer of one ring buffer map.
pub struct Ring {
    map: MapData,
    /// The consumer page (written: the consumer position).
    consumer: Mapping,
    /// The producer page, then the data area once.
    producer: Mapping,
    page: usize,
    mask: u64,
    /// Where reading is: ahead of the position written back while a record is in use.
    pos: u64,
    /// The producer's position, as last read.
    producer_pos: u64,
    /// A record that wrapped around the end, made contiguous.
    wrapped: Vec<u8>,
}

// SAFETY: the mappings are shared memory owned by the Ring (a raw pointer is not Send by
// default); the kernel is synchronised with through the atomics, and `next` needs `&mut`.
unsafe impl Send for Ring {}

impl Ring {
    pub fn new(map: MapData) -> Result<Self, RingError> {
        let size = map.info().map_err(RingError::Info)?.max_entries();
        if !size.is_power_of_two() {
            return Err(RingError::Size(size));
        }
        let page = rustix::param::page_size();
        let fd = map.fd().as_fd();
        let consumer = Mapping::new(fd, page, true, 0).map_err(RingError::Map)?;
        let producer =
            Mapping::new(fd, page + size as usize, false, page as u64).map_err(RingError::Map)?;
        let mut ring = Ring {
            map,
            consumer,
            producer,
            page,
            mask: u64::from(size) - 1,
            pos: 0,
            producer_pos: 0,
            wrapped: Vec::new(),
        };
        ring.pos = ring.consumer_pos().load(Ordering::Acquire);
        Ok(ring)
    }

    /// Bytes of data (the map's size).
    pub fn data_bytes(&self) -> usize {
        self.mask as usize + 1
    }

    fn consumer_pos(&self) -> &AtomicU64 {
        position(&self.consumer)
    }

    fn producer_pos(&self) -> u64 {
        position(&self.producer).load(Ordering::Acquire)
    }

    /// The data area's byte at ring offset `off` (< size).
    fn data(&self, off: usize) -> *const u8 {
        // SAFETY: `page + off` is within the producer mapping (page + size bytes).
        unsafe { self.producer.ptr.as_ptr().add(self.page + off) }
    }

    /// The next record, if one is complete; it is consumed when the returned item is dropped.
    pub fn next_record(&mut self) -> Option<Item<'_>> {
        loop {
            if self.pos >= self.producer_pos {
                self.producer_pos = self.producer_pos();
                if self.pos >= self.producer_pos {
                    return None;
                }
            }
            let off = (self.pos & self.mask) as usize;
            // SAFETY: headers are 8-aligned and never wrap (the size is a multiple of 8); the
            // kernel commits a record by writing its header's length atomically.
            let header = unsafe { &*self.data(off).cast::<AtomicU32>() }.load(Ordering::Acquire);
            if header & BUSY != 0 {
                return None;
            }
            let len = (header & !(BUSY | DISCARD)) as usize;
            let next = self.pos + ((HEADER + len).next_multiple_of(8)) as u64;
            if header & DISCARD != 0 || len > self.data_bytes() - HEADER {
                self.release(next);
                continue;
            }
            let start = (off + HEADER) & self.mask as usize;
            let first = len.min(self.data_bytes() - start);
            // Borrowed apart: the record's bytes (the mapping's or the copy's) and what its
            // drop writes.
            let Ring {
                consumer,
                producer,
                page,
                pos,
                wrapped,
                ..
            } = self;
            // SAFETY: the data area starts a page into the producer mapping.
            let area = unsafe { producer.ptr.as_ptr().add(*page) };
            // SAFETY: committed record bytes within the data area: `first` from `start`, the
            // rest from its beginning; the kernel does not reuse them before the consumer
            // position passes them, which only this item's drop does.
            let bytes: &[u8] = unsafe {
                if first == len {
                    std::slice::from_raw_parts(area.add(start), len)
                } else {
                    wrapped.clear();
                    wrapped.extend_from_slice(std::slice::from_raw_parts(area.add(start), first));
                    wrapped.extend_from_slice(std::slice::from_raw_parts(area, len - first));
                    &wrapped[..]
                }
            };
            return Some(Item {
                bytes,
                consumer: position(consumer),
                pos,
                next,
            });
        }
    }

    /// How far the kernel has written now: a drain up to it ends, however fast the kernel
    /// writes meanwhile.
    pub fn written(&self) -> u64 {
        self.producer_pos()
    }

    /// The next record if it begins before `end` (from [`Ring::written`]).
    pub fn next_record_before(&mut self, end: u64) -> Option<Item<'_>> {
        if self.pos >= end {
            return None;
        }
        self.next_record()
    }

    /// Whether every record that begins before `end` (from [`Ring::written`]) was used.
    pub fn taken_to(&self, end: u64) -> bool {
        self.pos >= end
    }

    fn release(&mut self, next: u64) {
        self.pos = next;
        self.consumer_pos().store(next, Ordering::Release);
    }
}

/// The u64 position at the start of a ring's consumer or producer page.
fn position(m: &Mapping) -> &AtomicU64 {
    // SAFETY: the page starts with the kernel's u64 position, page-aligned, shared with the
    // kernel, which reads and writes it atomically; it lives as long as the mapping.
    unsafe { m.ptr.cast::<AtomicU64>().as_ref() }
}

impl AsFd for Ring {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.map.fd().as_fd()
    }
}

impl AsRawFd for Ring {
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}

/// One record of the ring, in use until dropped.
pub struct Item<'a> {
    bytes: &'a [u8],
    consumer: &'a AtomicU64,
    pos: &'a mut u64,
    next: u64,
}

impl Deref for Item<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.bytes
    }
}

impl Drop for Item<'_> {
    fn drop(&mut self) {
        *self.pos = self.next;
        self.consumer.store(self.next, Ordering::Release);
    }
}
