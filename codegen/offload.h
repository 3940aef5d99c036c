/* Offload: the whole step is known before it runs, so where every byte of the
 * parameters, gradients and optimizer state lives at every instruction is planned
 * ahead of time (Gemini samples memory in a warm-up step instead).
 *
 * Chunks. Parameters, with their gradients and optimizer state, are packed in program
 * order (those without weight decay first, then the others, each in the order the
 * forward pass reads them: codegen/lower.c) into chunks; a parameter is never
 * split. The chunk size is the candidate (from the largest parameter up to the whole
 * state) that wastes the least: the sum over chunks of the chunk size less what it
 * holds, ties to the smaller size; a chunk must leave room on the device for the
 * parts one instruction needs with the next chunk in flight.
 *
 * Homes. Between steps every part is at its home: parameters and optimizer state on
 * the host when the host holds them (--host-memory), else the optimizer state, then
 * the parameters, in NVMe files; gradients exist only inside a step. When the whole
 * state and the activations fit the device, nothing is offloaded (no plan).
 *
 * Across data-parallel ranks. Without ZeRO every rank holds the whole state at its
 * homes (the gradient sums are in `step`, codegen/compose.h). With ZeRO-3 the chunks
 * are dealt to the ranks (whole chunks, balanced by bytes: a chunk never straddles two
 * owners) and each rank holds only its own chunks' parameters and optimizer state at
 * its homes, as Gemini and ZeRO-Infinity do. Every rank runs the same device
 * residency (the plan below), so a chunk comes to every rank's device at once: its
 * owner copies it from its home and the others create it (a move from "zero"), and
 * after the owner's copy has landed one broadcast over the dp group from the owner
 * fills the others' copies; it leaves by a drop everywhere. A gradient chunk leaves
 * the device by one reduce onto its owner, whose copy goes home to its host while the
 * others drop theirs; when it comes back (a tied weight's gradient written again) the
 * owner brings the partial sum back and the others start from zeros, so the next
 * reduce adds only what is new. Moves that touch the host or NVMe carry the owner's
 * dp_rank, the creation of the others' copies one move per other rank; the gradient
 * norm and the optimizer run on each owner's host for its chunks (codegen/compose.h).
 * Host and NVMe peaks and the bytes moved are predicted per rank.
 *
 * The plan, instruction by instruction, over the step's exact access sequence (the
 * lowered program's kernels and GEMMs, each mapped to the chunk parts whose bytes it
 * reads or writes): before an instruction, the parts it needs come to the device
 * (parameters copied and kept at home, clean; gradients created zero, or brought back
 * when a chunk's gradient is written again later, as a tied embedding's is); when the
 * device is full, the resident part used furthest in the future leaves (Belady's
 * rule: a clean parameter copy is dropped, a gradient is moved home to the host).
 * After each instruction, parts not used again leave at once, and the parts of the
 * next instructions are prefetched into the free room, so their copies overlap the
 * kernels that run meanwhile (one copy thread in order). The device holds the work
 * tier (activations: the memory plan's peak) and the collectives' staging buffer for the
 * whole step, so the room for chunks is the capacity less those (work_bytes). The optimizer runs on the host (as
 * CPUAdam does) for every chunk, after the gradient norm, also on the host: chunk by
 * chunk, its optimizer state (and parameters) brought from NVMe first when that is
 * their home and written back after, the next chunk's read overlapping this chunk's
 * update. LAMB's update passes over the chunks three times so (its moments, its norms,
 * then after "trust" its update: codegen/compose.h); a chunk's gradients leave the host
 * after the first.
 *
 * Predictions, from the same simulation: the peak bytes of each location at the
 * runtime's granule (the page: committed ranges count once per page, as the runtime
 * counts them), the bytes moved, and the time transfers are exposed, from a timeline
 * of the instructions (roofline times from the op table's costs on the cluster
 * profile) against the copy thread (host link and NVMe bandwidths). */
#ifndef COLOSSALC_OFFLOAD_H
#define COLOSSALC_OFFLOAD_H
#include "codegen/lower.h"
#include "plan/cluster.h"

/* Locations and parts: program/isa.h's (IsaLoc, IsaPart). */
typedef IsaLoc Loc;

typedef struct OChunk {
  int lo, hi;           /* parameters [lo, hi) of the program */
  int64_t start, end;   /* byte range in PARAMS and GRADS (and OPT, and OPT + opt_v_offset) */
  Loc home[PART_COUNT]; /* the owner's homes (every rank's without ZeRO) */
  int owner;            /* ZeRO-3: the data-parallel rank holding it between steps; -1:
                         * every rank holds its own copy (ZeRO 0) */
  int fetches;          /* times its parameters come to the device in a step */
} OChunk;

typedef struct OffloadOptions {
  int64_t device_memory; /* bytes: all four tiers on the device */
  int64_t host_memory;   /* bytes a node's host may hold of the state (0: unlimited) */
  int ranks_per_node;    /* ZeRO-3: the dp ranks sharing that host (0 or 1: one) */
  const Cluster *cl;     /* bandwidths and compute, for the time prediction */
} OffloadOptions;

typedef struct OffloadPlan {
  int64_t capacity, work_bytes, state_bytes, granule;
  int64_t chunk_bytes, waste;
  int nchunks;
  OChunk *chunk;
  int64_t device_peak, host_peak, nvme_peak, transfer_bytes; /* host, nvme: the most of a rank */
  int ranks; /* dp with ZeRO-3 (the per-rank figures below differ), else 1 */
  int64_t *rank_host_peak, *rank_nvme_peak, *rank_transfer; /* [ranks] */
  double compute_s, transfer_s, exposed_s, comm_s;          /* comm_s: ZeRO-3's collectives, in order */
  /* memory over the step, one point per instruction of step, gradnorm and update */
  int npoints;
  int64_t *dev_at, *host_at;
  int *phase_end; /* [3] point where step, gradnorm and update end */
  int nevents;    /* moves, for the picture: point, chunk, part, from, to */
  int (*event)[5];
} OffloadPlan;

/* The bytes an instruction of p touches: up to K_MAX_BUFS ranges [lo, hi) of a tier,
 * write set for what it may write (GEMM C, zeroing, every tier but PARAMS for kernels, a
 * collective's destination); none for the other instructions. */
typedef struct Touch {
  int tier;
  int64_t lo, hi;
  bool write;
} Touch;
int instr_touch(const Program *p, const IsaInstr *in, Touch *t);

/* The chunks of p (one pipeline stage and tensor-parallel rank) for o: their size, under
 * ZeRO-3 their owners (p->params[].owner set to them, before compose_step reads them),
 * and their homes; NULL when everything fits the device. A budget that cannot be met is
 * a user error (error_plain) with the numbers. */
OffloadPlan *offload_chunks(Program *p, const OffloadOptions *o);
/* Plans op's chunks over p's lists (composed, micro-batches unrolled into `step`) and
 * rewrites step, sync, gradnorm and update with the moves; p->offload = op. */
void offload_plan(Program *p, OffloadPlan *op, const OffloadOptions *o);

/* The plan as text (--dump-plan), JSON (in the program and --dump-plan=json) and SVG. */
void offload_print(FILE *f, const Program *p, const OffloadPlan *op);
void offload_svg(FILE *f, const Program *p, const OffloadPlan *op);

#endif
