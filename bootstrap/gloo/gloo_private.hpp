// What libhpct_gloo.so offers hpct's own libhpct_torch.so, and nobody else.
#pragma once

#include <memory>

#include <gloo/transport/context.h>
#include <gloo/transport/device.h>

#include "bootstrap/base/private_api.h"
#include "hpct/gloo.h"

// The device and transport context (its connected pairs) of a context
// made by hpct_gloo_context_create, to put into another gloo::Context of
// the same rank and size (PyTorch's, inside connectFullMesh).  They stay
// valid after hpct_gloo_context_destroy.  A persistent context's handle is
// theirs from now on: do not destroy it; the last reference to the
// transport context destroys it, which gives its domain back with the
// pairs open.
extern "C" HPCT_PRIVATE void
hpct__gloo_context_parts(hpct_gloo_context *c, std::shared_ptr<gloo::transport::Device> *dev,
                         std::shared_ptr<gloo::transport::Context> *tctx);
