/* egpu's context tags from C: which request or job a thread's GPU work belongs to (issue 28).
 *
 * Under egpu's preloaded library (`egpu run`), every kernel launch, copy and allocation a thread
 * makes carries the thread's tags in its context (`tag_id`, `trace_id`, `span_id` of egpu.h's
 * launch, memcpy and alloc contexts). The library exports these functions; a program that should
 * also run without egpu finds them with dlsym(RTLD_DEFAULT, "egpu_tag_set") and skips them when
 * they are missing. Tags belong to the calling thread. */
#ifndef EGPU_TAGS_H
#define EGPU_TAGS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Sets the thread's tag id (0: none), its trace context kept; returns the previous tag id. */
uint64_t egpu_tag_set(uint64_t tag);

/* Sets the thread's W3C trace context: the trace id's high and low 64 bits and the parent span
 * id (all 0: none), its tag id kept. Returns 0. */
int egpu_trace_set(uint64_t trace_high, uint64_t trace_low, uint64_t span);

/* Sets the thread's W3C trace context from a `traceparent` header
 * ("00-<32 hex>-<16 hex>-<2 hex>"), its tag id kept; NULL clears it. Returns 0, or -1 for a
 * header that is not one (the tags unchanged). */
int egpu_traceparent_set(const char *traceparent);

/* The thread's tags: tag id, trace id high, trace id low, span id. */
void egpu_tags_get(uint64_t out[4]);

/* Sets the thread's tags to four words as egpu_tags_get writes them (a scope's end gives the
 * saved ones back); NULL clears them. */
void egpu_tags_put(const uint64_t words[4]);

#ifdef __cplusplus
}
#endif

#endif /* EGPU_TAGS_H */
