/* TensorBoard event files: scalar summaries in the TFRecord framing
 * (length, masked CRC-32C of the length, data, masked CRC-32C of the data)
 * that `tensorboard --logdir` reads, and a reader of that framing used by the
 * tests. Example support code: errors return -1 with a message in err. */
#ifndef CFORMER_TB_H
#define CFORMER_TB_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct tb_writer {
	FILE *f;
	char path[1024];
};

/* Create dir/events.out.tfevents.<unix time>.<host>.<pid>.<i> (dir must
 * exist; i makes the name new, never an existing file) and write the
 * file_version record. */
int tb_open(struct tb_writer *w, const char *dir, char *err, size_t errlen);
/* Append a scalar summary (tag, value) at step and wall time now; flushed. */
int tb_scalar(struct tb_writer *w, const char *tag, double value, int64_t step);
void tb_close(struct tb_writer *w);

/* CRC-32C (Castagnoli) and TensorFlow's masked form. */
uint32_t tb_crc32c(const uint8_t *p, size_t n);
uint32_t tb_masked_crc(const uint8_t *p, size_t n);

/* One scalar read back from an event file. */
struct tb_scalar_event {
	char tag[128];
	float value;
	int64_t step;
	double wall_time;
};
/* Read every record of path, checking both CRCs of each; decode the Events
 * and store their scalar values (up to max) in out. Returns the number of
 * scalars, or -1 with a message in err (bad framing, CRC mismatch, truncated
 * record, malformed protobuf, first record not file_version). */
int tb_read_scalars(const char *path, struct tb_scalar_event *out, int max, char *err,
		    size_t errlen);

#endif
