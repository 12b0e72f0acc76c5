/* Group-free collectives: collectives over ANY ordered subset of the world's ranks, with no
 * communicator to create. A group is a rank list plus a 64-bit id hashed from it; forming one is
 * local arithmetic (no message, no endpoint). Every member calls the same collectives on a group
 * in the same order, like MPI; a per-group sequence number (kept by the world, reset when the
 * world's epoch changes) and the group id are part of every message's tag, so collectives of
 * different groups that share ranks never mix, even when they run at the same time.
 *
 *     int ranks[] = {3, 0, 5};                 // world ranks, in group order
 *     wf_group g;
 *     wf_gfc_group_init(&g, ranks, 3);         // no communication
 *     wf_status st = wf_gfc_allreduce_f32(world, &g, grads, grads, n);
 *     if (st != WF_OK)                         // WF_EPEER / WF_ETIMEDOUT: a member failed
 *         fprintf(stderr, "allreduce: %s (rank %d)\n", wf_world_error(world),
 *                 wf_world_error_rank(world));
 *
 * All-reduce and reduce-scatter sum fp32 in a FIXED order: each element is
 * c[0] + c[1] + ... + c[n-1] over the group members' contributions in group order, so results
 * are bit-identical whatever the placement, timing or world ranks.
 *
 * Data moves straight from and into the caller's buffers. Between two members, a message
 * smaller than the put threshold (wf_gfc_set_put_threshold; 64 KiB by default) is a UCX tagged
 * message. For a larger one the receiver first tells the writer how to send it: either a region
 * (wf_world_mem_expose: its buffer registered once and cached), into which the writer puts,
 * flushes, then sends a done message; or "as a message". Receive buffers from
 * wf_world_mem_alloc (and the scratch of reduce-scatter and all-reduce) always take puts: peers
 * on the host map that memory, so a put is one memcpy by the writer, the fastest path (see
 * BENCHMARKS.md: 2-4x the bandwidth of ordinary memory, which UCX reaches on one host by CMA,
 * a kernel copy). Other buffers take puts too unless wf_gfc_set_put_caller_memory turns
 * that off. So: allocate large receive buffers with wf_world_mem_alloc. Sizes are bytes
 * unless a name says f32 (then floats). Buffers of one call must not overlap unless the
 * function says so.
 * Sizes that must agree between members (all-to-all-v counts) are checked: a disagreement is
 * WF_EPROTO on the members that see it (or WF_ETIMEDOUT after the wait bound when one side
 * moves a pair by put and the other by message), never a hang.
 *
 * Every call blocks until done or failed; each wait is bounded by the world's timeout. On error
 * the other members may be left waiting for this rank until their own time-outs; the world's
 * epoch change at a replacement (wf_world_admit) makes the group usable again.
 * Threading: as the world (one thread drives it). Returns, unless said otherwise: WF_OK,
 * WF_EINVAL (bad group, not a member, bad sizes), WF_ENOMEM, WF_ETIMEDOUT, WF_EPEER,
 * WF_EPROTO (a peer sent a different size than expected). */
#ifndef WF_ENGINE_GFC_H
#define WF_ENGINE_GFC_H

#include <stddef.h>
#include <stdint.h>

#include "engine/world/world.h"
#include "proto/base/status.h"
#include "proto/task.h" /* wf_group, WF_MAX_GROUP_RANKS */

/* Fills g from ranks[0..n) (distinct, >= 0, 1 <= n <= WF_MAX_GROUP_RANKS) and hashes its id.
 * Purely local. Returns WF_OK or WF_EINVAL. */
wf_status wf_gfc_group_init(wf_group *g, const int *ranks, int n);
/* The 64-bit id of an ordered rank list (FNV-1a); the same list gives the same id anywhere. */
uint64_t wf_gfc_group_hash(const int *ranks, int n);
/* The position of a world rank in the group, or -1 if it is not a member. */
int wf_gfc_group_index(const wf_group *g, int world_rank);

/* Messages of at least `bytes` (per pair of members; >= 1) may move as puts; SIZE_MAX: never.
 * Every member of a group must use the same value. Per world; default 64 KiB. */
void wf_gfc_set_put_threshold(wf_world *w, size_t bytes);
/* Whether this member's large receives into ordinary memory (not from wf_world_mem_alloc) come
 * as puts too (1, the default: puts are what registers and caches the receiver's buffer; on
 * one host UCX reaches such memory by CMA, within noise of its rendezvous messages, see
 * BENCHMARKS.md) or as tagged messages (0). A receiver's own choice: members need not agree. */
void wf_gfc_set_put_caller_memory(wf_world *w, int on);

wf_status wf_gfc_barrier(wf_world *w, const wf_group *g);
/* buf[0..len) of member `root` (a group index) is copied to every member's buf. */
wf_status wf_gfc_broadcast(wf_world *w, const wf_group *g, int root, void *buf, size_t len);
/* recv[i*len .. (i+1)*len) = member i's send[0..len). */
wf_status wf_gfc_allgather(wf_world *w, const wf_group *g, const void *send, void *recv,
                           size_t len);
/* recv[i*len ..] on member j = send[j*len ..] on member i. send == recv allowed (in place; see
 * wf_gfc_alltoallv). */
wf_status wf_gfc_alltoall(wf_world *w, const wf_group *g, const void *send, void *recv,
                          size_t len);
/* Member i sends send[send_displs[j] .. + send_counts[j]) to member j, which receives it at
 * recv[recv_displs[i] ..] with recv_counts[i] equal to it (WF_EPROTO if not). Bytes.
 * In place: send == recv, with send_counts == recv_counts and send_displs == recv_displs
 * (else WF_EINVAL), blocks not overlapping; member i's block for j is then replaced by j's
 * block for i, so a pair's two counts must be equal (WF_EPROTO on both if not, data
 * untouched). Every member of the call must use it in place (else both sides of a pair time
 * out). It is the fast path: two members whose blocks are in memory the other maps (from
 * wf_world_mem_alloc, peers on one host) swap them through the mapping, each member half of
 * the bytes, with no copy of the own block (BENCHMARKS.md, 2 ranks on one host: 2.4-2.7x the
 * median bus bandwidth of the out-of-place all-to-all at 1 MiB, 3-9x at 4 MiB); other pairs
 * are copied aside, then sent. When an in-place call fails (a member died or timed out), the
 * blocks for the other members are undefined: each byte holds its old value or the peer's (a
 * swap may have stopped part-way; a dead peer may have swapped part of its half; a live one
 * still inside the call may go on swapping its half until its own call returns). This member's
 * own block and the bytes outside the blocks are untouched (tested with a member killed
 * mid-swap). */
wf_status wf_gfc_alltoallv(wf_world *w, const wf_group *g, const void *send,
                           const size_t *send_counts, const size_t *send_displs, void *recv,
                           const size_t *recv_counts, const size_t *recv_displs);
/* send holds n blocks of `count` floats; member i gets the fixed-order sum of block i. */
wf_status wf_gfc_reduce_scatter_f32(wf_world *w, const wf_group *g, const float *send,
                                    float *recv, size_t count);
/* recv[0..count) = fixed-order sum of every member's send[0..count); send == recv allowed. */
wf_status wf_gfc_allreduce_f32(wf_world *w, const wf_group *g, const float *send, float *recv,
                               size_t count);
/* Point-to-point inside a group: messages between two members with the same tag arrive in
 * order. Uses no sequence number, so other members are not involved. *received may be NULL. */
wf_status wf_gfc_send(wf_world *w, const wf_group *g, int dst, uint32_t tag, const void *buf,
                      size_t len);
wf_status wf_gfc_recv(wf_world *w, const wf_group *g, int src, uint32_t tag, void *buf,
                      size_t len, size_t *received);

#endif
