/* Tests sched/handoff.c: FIFO order, bound, wake-up on the empty edge only, close, threads. */
#include "check_main.h"
#include "proto/base/handoff.h"

#include <pthread.h>
#include <sched.h>

typedef struct item {
    wf_handoff_item link; /* first member: the list item is the struct */
    int value;
} item;

static void count_wake(void *user) { (*(int *)user)++; }

START_TEST(fifo_bound_and_edge_wake) {
    wf_handoff q;
    int wakes = 0;
    ck_assert_int_eq(wf_handoff_init(&q, 3, count_wake, &wakes), WF_OK);
    item items[4];
    for (int i = 0; i < 4; i++) items[i].value = i;
    ck_assert_int_eq(wf_handoff_push(&q, &items[0].link), WF_OK);
    ck_assert_int_eq(wf_handoff_push(&q, &items[1].link), WF_OK);
    ck_assert_int_eq(wf_handoff_push(&q, &items[2].link), WF_OK);
    ck_assert_int_eq(wf_handoff_push(&q, &items[3].link), WF_EFULL);
    ck_assert_int_eq(wakes, 1);
    ck_assert_uint_eq(wf_handoff_length(&q), 3);
    wf_handoff_item *list = wf_handoff_take_all(&q);
    int expect = 0;
    for (wf_handoff_item *it = list; it; it = it->next) ck_assert_int_eq(((item *)it)->value, expect++);
    ck_assert_int_eq(expect, 3);
    ck_assert_ptr_null(wf_handoff_take_all(&q));
    ck_assert_int_eq(wf_handoff_push(&q, &items[3].link), WF_OK);
    ck_assert_int_eq(wakes, 2);
    wf_handoff_close(&q);
    ck_assert_int_eq(wf_handoff_push(&q, &items[0].link), WF_ECLOSED);
    ck_assert_ptr_eq(wf_handoff_take_all(&q), &items[3].link);
    wf_handoff_free(&q);
}
END_TEST

START_TEST(wait_times_out_when_empty) {
    wf_handoff q;
    ck_assert_int_eq(wf_handoff_init(&q, 0, NULL, NULL), WF_OK);
    ck_assert_int_eq(wf_handoff_wait(&q, 10), 0);
    wf_handoff_free(&q);
}
END_TEST

#define PRODUCERS 4
#define PER_PRODUCER 5000

typedef struct producer_arg {
    wf_handoff *q;
    item *items;
} producer_arg;

static void *produce(void *p) {
    producer_arg *a = p;
    for (int i = 0; i < PER_PRODUCER; i++)
        while (wf_handoff_push(a->q, &a->items[i].link) == WF_EFULL) sched_yield();
    return NULL;
}

START_TEST(many_producers_lose_nothing) {
    static item items[PRODUCERS][PER_PRODUCER];
    wf_handoff q;
    ck_assert_int_eq(wf_handoff_init(&q, 64, NULL, NULL), WF_OK);
    pthread_t threads[PRODUCERS];
    producer_arg args[PRODUCERS];
    for (int p = 0; p < PRODUCERS; p++) {
        for (int i = 0; i < PER_PRODUCER; i++) items[p][i].value = p * PER_PRODUCER + i;
        args[p] = (producer_arg){&q, items[p]};
        pthread_create(&threads[p], NULL, produce, &args[p]);
    }
    static unsigned char seen[PRODUCERS * PER_PRODUCER];
    int last_of[PRODUCERS] = {-1, -1, -1, -1};
    int received = 0;
    while (received < PRODUCERS * PER_PRODUCER) {
        wf_handoff_wait(&q, 100);
        for (wf_handoff_item *it = wf_handoff_take_all(&q); it; it = it->next) {
            int v = ((item *)it)->value;
            ck_assert_int_eq(seen[v], 0);
            seen[v] = 1;
            ck_assert_int_gt(v, last_of[v / PER_PRODUCER]); /* per-producer order kept */
            last_of[v / PER_PRODUCER] = v;
            received++;
        }
    }
    for (int p = 0; p < PRODUCERS; p++) pthread_join(threads[p], NULL);
    wf_handoff_free(&q);
}
END_TEST

static Suite *handoff_suite(void) {
    Suite *s = suite_create("sched/handoff");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, fifo_bound_and_edge_wake);
    tcase_add_test(tc, wait_times_out_when_empty);
    tcase_add_test(tc, many_producers_lose_nothing);
    suite_add_tcase(s, tc);
    return s;
}

WF_CHECK_MAIN(handoff_suite)
