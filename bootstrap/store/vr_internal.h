/* Inside the replication protocol (vr.h): what its two halves share.
 * vr.c: the world, a group's state, reconfiguration and view change;
 * vr_recv.c: the messages, timers and connections that drive them. */
#ifndef HPCT_STORE_VR_INTERNAL_H
#define HPCT_STORE_VR_INTERNAL_H

#include "bootstrap/store/vr.h"

#define NEVER   1e300
#define MARGIN  0.9 /* of the lease: clocks whose rates differ by 10% */
#define BIT(i)  (1u << (i))
/* what this rank knows of another (vr_world.gone), weakest first: a later
 * kind replaces an earlier one */
#define GONE_LEAVING 1 /* it exits once its groups have replaced it */
#define GONE_SUSPECT 2
#define GONE_LEFT    3
#define GONE_FENCED  4

int vr__exits(const struct vr_world *w, int r);
int vr__is_dead(const struct vr_world *w, int r);
int vr__idx_of(const struct vr *v, int rank);
int vr__in_list(const int *l, int n, int rank);
int vr__i_am_primary(const struct vr *v, const struct vr_world *w);
void vr__note(const struct vr *v, const struct vr_world *w, const char *fmt, ...);
void vr__event(const struct vr *v, const struct vr_world *w, enum vr_event ev);
void vr__release(const struct vr_world *w, struct vr_snap *s);
struct vr_msg vr__base(const struct vr *v, const struct vr_world *w, uint8_t type);
void vr__with_members(struct vr_msg *m, const struct vr *v);
void vr__send(const struct vr_world *w, int to, const struct vr_msg *m);
void vr__gone_why(struct vr_world *w, int rank, int kind, const char *why);
const char *vr__why_of(const struct vr_world *w, int rank);
void vr__lead(struct vr *v, double now);
void vr__recommit(struct vr *v, const struct vr_world *w);
double vr__confirmed(const struct vr *v, const struct vr_world *w, double now);
void vr__beat(struct vr *v, struct vr_world *w, int i, double now);
void vr__send_data(struct vr *v, struct vr_world *w, int to, uint8_t type, double now);
void vr__reconfigure(struct vr *v, struct vr_world *w, double now, int out, const char *why);
void vr__reconfigured(struct vr *v, struct vr_world *w, double now);
uint32_t vr__next_view(const struct vr *v, const struct vr_world *w, uint32_t from);
void vr__check_dvc(struct vr *v, struct vr_world *w, double now);
void vr__check_svc(struct vr *v, struct vr_world *w, double now);
void vr__svc_all(struct vr *v, struct vr_world *w, double now);
void vr__change(struct vr *v, struct vr_world *w, double now, uint32_t nv);
int vr__free_to_join(const struct vr *v, const struct vr_world *w, double now);

#endif
