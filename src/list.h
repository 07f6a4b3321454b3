/* The one intrusive doubly linked list of libarena: chunk descriptors in
 * their free-run bin and on the LRU of dirty chunks, arena chunks on their
 * arena's list, slabs on their class's list, thread caches on the list of
 * live ones.  An element embeds a link_t; the list holds the first and the
 * last link.  A list of all zeros is empty (lists live in zeroed memory:
 * static, TLS, fresh mappings), and a removed link is left as it was. */
#ifndef ARENA_LIST_H
#define ARENA_LIST_H

#include <stdbool.h>
#include <stddef.h>

#include "arena_assert.h"

typedef struct link {
	struct link *next, *prev;
} link_t;

typedef struct list {
	link_t *head, *tail;
} list_t;

static inline bool list_empty(const list_t *l)
{
	return l->head == NULL;
}

static inline void list_push_front(list_t *l, link_t *n)
{
	ARENA_ASSERT((l->head == NULL) == (l->tail == NULL) && n != l->head);
	n->prev = NULL;
	n->next = l->head;
	if (l->head)
		l->head->prev = n;
	else
		l->tail = n;
	l->head = n;
}

static inline void list_push_back(list_t *l, link_t *n)
{
	ARENA_ASSERT((l->head == NULL) == (l->tail == NULL) && n != l->tail);
	n->next = NULL;
	n->prev = l->tail;
	if (l->tail)
		l->tail->next = n;
	else
		l->head = n;
	l->tail = n;
}

/* n must be on l. */
static inline void list_remove(list_t *l, link_t *n)
{
	ARENA_ASSERT(n->prev ? n->prev->next == n : l->head == n);
	ARENA_ASSERT(n->next ? n->next->prev == n : l->tail == n);
	if (n->prev)
		n->prev->next = n->next;
	else
		l->head = n->next;
	if (n->next)
		n->next->prev = n->prev;
	else
		l->tail = n->prev;
}

/* The element of type holding link (as member); NULL for a NULL link. */
#define list_entry(link, type, member) \
	((link) ? (type *)(void *)((char *)(link) - offsetof(type, member)) : (type *)NULL)
#define list_first(l, type, member) list_entry((l)->head, type, member)
#define list_last(l, type, member) list_entry((l)->tail, type, member)
#define list_next(e, type, member) list_entry((e)->member.next, type, member)
/* Every element of l in order; the body may not remove var.  (type and var
 * are a declaration's: they cannot take parentheses.) */
/* NOLINTBEGIN(bugprone-macro-parentheses) */
#define list_for_each(var, l, type, member) \
	for (type *var = list_first(l, type, member); var; var = list_next(var, type, member))
/* NOLINTEND(bugprone-macro-parentheses) */

#endif
