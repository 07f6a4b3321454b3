/* Purging: giving free memory back to the kernel.  For now only on request
 * (malloc_trim, arena_purge) and for free chunks beyond conf.dirty_max (in
 * chunk.c); time-based decay and huge-page-aware purging come with the page
 * states layer. */
#include "internal.h"

size_t purge_all(void)
{
	if (tc.state == TC_ACTIVE)
		for (unsigned c = 0; c < NCACHED; c++)
			tcache_flush_bin(&tc, c, 0);
	return arena_purge_all() + chunk_purge_all();
}
