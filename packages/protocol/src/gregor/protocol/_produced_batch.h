/*
 * What gregor.protocol's C extension shares with other Gregor extensions: the check of one
 * produced batch, CRC-32C, a BatchBuilder's append and the offsets of a class's slots,
 * reached through a capsule (so the code exists once, in _records_speedups), and the few
 * inline helpers both sides need to stamp a batch.
 *
 * A user includes Python.h first, imports the capsule with
 * PyCapsule_Import(GREGOR_PRODUCED_BATCH_CAPSULE, 0) and checks that `version` is at least
 * the one that brought the fields it uses: a newer table only adds fields at its end.
 */
#ifndef GREGOR_PRODUCED_BATCH_H
#define GREGOR_PRODUCED_BATCH_H

#include <stddef.h>
#include <stdint.h>

#define GREGOR_PRODUCED_BATCH_CAPSULE "gregor.protocol._records_speedups.produced_batch_api"
#define GREGOR_PRODUCED_BATCH_API_VERSION 2 /* 1: check, crc32c; 2: builder_append, slot_offsets */

/* Stamping changes only the first 16 bytes: base offset (0-8) and partition leader epoch
 * (12-16). The CRC covers the batch from byte 21 on, so it stays valid. */
#define GREGOR_STAMPED_PREFIX 16

/* The header fields of a produced batch that a log needs after the check. */
typedef struct {
    int64_t batch_length; /* the whole batch's size is batch_length + 12 */
    int32_t last_offset_delta;
    int64_t base_timestamp;
    int64_t max_timestamp;
    int64_t producer_id;
    int producer_epoch;
    int32_t base_sequence;
} gregor_produced_header;

typedef struct {
    int version;
    /* 1 and *out filled when [data, data + size) is exactly one well-formed batch as a
     * client produces it (see records.stamp_produced_batch), leader_epoch fits 32 bits and
     * size <= max_size; 0 otherwise. Raises nothing and needs no GIL. */
    int (*check)(const unsigned char *data, int64_t size, int64_t leader_epoch,
                 int64_t max_size, gregor_produced_header *out);
    /* The CRC-32C of [p, p + n), continuing from value (0 to start). */
    uint32_t (*crc32c)(uint32_t value, const unsigned char *p, size_t n);
    /* BatchBuilder.append(value, key, (), timestamp) for a builder of the class records.py
     * bound: 1 when appended, 0 when the record needs the general encoder (builder
     * untouched: another class, a field that is not bytes or None, a delta out of range),
     * -1 with an exception set. Needs the GIL. */
    int (*builder_append)(PyObject *builder, PyObject *key, PyObject *value, int64_t timestamp);
    /* The offsets of cls's writable __slots__ `names`, read from its member descriptors, so
     * C code can load and store them directly; -1 with TypeError when one is not such a
     * slot. */
    int (*slot_offsets)(PyObject *cls, const char *const *names, int count, Py_ssize_t *offsets);
} gregor_produced_batch_api;

static inline uint64_t
gregor_read_be(const unsigned char *p, int nbytes)
{
    uint64_t value = 0;
    for (int i = 0; i < nbytes; i++) {
        value = (value << 8) | p[i];
    }
    return value;
}

static inline void
gregor_write_be(unsigned char *p, uint64_t value, int nbytes)
{
    for (int i = nbytes - 1; i >= 0; i--) {
        p[i] = (unsigned char)value;
        value >>= 8;
    }
}

/* The batch's first GREGOR_STAMPED_PREFIX bytes with base_offset and leader_epoch set. */
static inline void
gregor_stamp_prefix(unsigned char prefix[GREGOR_STAMPED_PREFIX], const unsigned char *data,
                    int64_t base_offset, int32_t leader_epoch)
{
    for (int i = 8; i < 12; i++) {
        prefix[i] = data[i]; /* the batch length, unchanged */
    }
    gregor_write_be(prefix, (uint64_t)base_offset, 8);
    gregor_write_be(prefix + 12, (uint64_t)(uint32_t)leader_epoch, 4);
}

#endif
