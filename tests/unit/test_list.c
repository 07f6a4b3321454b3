/*
 * list.h: the one intrusive doubly linked list (chunk bins and LRU, arena
 * chunks, slab lists, live thread caches).  Random pushes at both ends and
 * removals anywhere, checked after each step against a plain array that
 * holds the expected order, walked both ways.
 */
#include "fake_os.h"
#include "unit.h"

#define NELEM 64

typedef struct item {
	unsigned id;
	link_t link;
	bool on;
} item_t;

/* l holds exactly model[0..n) in that order, linked both ways. */
static void check(const list_t *l, item_t *const *model, unsigned n)
{
	cr_assert_eq(list_empty(l), n == 0);
	unsigned i = 0;
	list_for_each(e, l, item_t, link) {
		cr_assert_lt(i, n, "more elements than the %u expected", n);
		cr_assert_eq(e, model[i], "position %u: id %u, expected %u", i, e->id, model[i]->id);
		i++;
	}
	cr_assert_eq(i, n);
	/* backwards, through prev, from the tail */
	const link_t *k = l->tail;
	for (unsigned j = n; j-- > 0; k = k->prev)
		cr_assert_eq(k, &model[j]->link, "backwards, position %u", j);
	cr_assert_null(k);
	if (n) {
		cr_assert_null(l->head->prev);
		cr_assert_null(l->tail->next);
	}
	cr_assert_eq(list_first(l, item_t, link), n ? model[0] : NULL, "first element");
	cr_assert_eq(list_last(l, item_t, link), n ? model[n - 1] : NULL, "last element");
}

Test(list, zeroed_list_is_empty)
{
	static list_t l; /* zero, as in .bss, TLS and fresh mappings */
	cr_assert(list_empty(&l));
	cr_assert_null(list_first(&l, item_t, link));
	cr_assert_null(list_last(&l, item_t, link));
	unsigned n = 0;
	list_for_each(e, &l, item_t, link) {
		(void)e;
		n++;
	}
	cr_assert_eq(n, 0);
}

Test(list, entry_finds_the_container)
{
	item_t it = { .id = 7 };
	cr_assert_eq(list_entry(&it.link, item_t, link), &it);
	link_t *none = NULL; /* a variable: a literal NULL is arithmetic on null to clang */
	cr_assert_null(list_entry(none, item_t, link));
}

Test(list, random_operations_match_a_model)
{
	item_t items[NELEM];
	item_t *model[NELEM];
	unsigned n = 0;
	list_t l = { 0 };
	urng_t rng = { 12345 };
	for (unsigned i = 0; i < NELEM; i++)
		items[i] = (item_t){ .id = i };
	for (unsigned step = 0; step < 20000; step++) {
		item_t *it = &items[urng_next(&rng) % NELEM];
		if (it->on) {
			list_remove(&l, &it->link);
			unsigned at = 0;
			while (model[at] != it)
				at++;
			memmove(&model[at], &model[at + 1], (n - at - 1) * sizeof(*model));
			n--;
		} else if (urng_next(&rng) & 1) {
			list_push_front(&l, &it->link);
			memmove(&model[1], &model[0], n * sizeof(*model));
			model[0] = it;
			n++;
		} else {
			list_push_back(&l, &it->link);
			model[n++] = it;
		}
		it->on = !it->on;
		check(&l, model, n);
	}
}

Test(list, remove_only_element_empties)
{
	item_t it = { .id = 1 };
	list_t l = { 0 };
	list_push_back(&l, &it.link);
	cr_assert_eq(l.head, &it.link);
	cr_assert_eq(l.tail, &it.link);
	list_remove(&l, &it.link);
	cr_assert(list_empty(&l));
	cr_assert_null(l.tail);
}
