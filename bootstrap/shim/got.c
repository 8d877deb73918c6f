/* GOT slots of a loaded object, found from its dynamic section and
 * rewritten in place (see got.h). */
#include "bootstrap/shim/got.h"

#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bootstrap/base/log.h"
#include "hpct/hpct.h"

#if defined(__x86_64__)
#define SLOT_JUMP R_X86_64_JUMP_SLOT
#define SLOT_DATA R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define SLOT_JUMP R_AARCH64_JUMP_SLOT
#define SLOT_DATA R_AARCH64_GLOB_DAT
#else
#error "got.c knows the GOT relocations of x86-64 and aarch64 only"
#endif

#if __ELF_NATIVE_CLASS != 64
#error "got.c reads 64-bit ELF (Elf64_Rela) only"
#endif

/* what dl_iterate_phdr tells of the object, copied out of its callback so
 * that nothing below runs under the loader's lock */
struct object {
	const char *prefix;
	int found;
	ElfW(Addr) base;
	const ElfW(Phdr) * phdr;
	ElfW(Half) phnum;
	char path[4096];
};

/* 1 when the loaded object's path has a basename that starts with
 * prefix (the program itself, named "", has none). */
static int named(const char *path, const char *prefix)
{
	if (!path || !*path)
		return 0;
	const char *slash = strrchr(path, '/');
	const char *base = slash ? slash + 1 : path;
	return strncmp(base, prefix, strlen(prefix)) == 0;
}

static int match(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct object *o = arg;
	const char *name = info->dlpi_name;
	if (!named(name, o->prefix))
		return 0;
	o->found = 1;
	o->base = info->dlpi_addr;
	o->phdr = info->dlpi_phdr;
	o->phnum = info->dlpi_phnum;
	size_t n = strlen(name);
	if (n >= sizeof(o->path))
		n = sizeof(o->path) - 1;
	memcpy(o->path, name, n);
	o->path[n] = 0;
	return 1;
}

/* glibc relocates the dynamic section's addresses in place where the
 * section is writable (x86-64, aarch64) and leaves them as link-time
 * offsets where it is not */
static uintptr_t at(const struct object *o, ElfW(Addr) p)
{
	return p < o->base ? (uintptr_t)o->base + p : (uintptr_t)p;
}

/* The protection the loader left on the page of `slot`: PT_GNU_RELRO's
 * whole pages read-only (glibc leaves its last partial page as the
 * PT_LOAD has it), else the containing PT_LOAD's flags. */
static int slot_prot(const struct object *o, uintptr_t slot, uintptr_t page)
{
	int prot = -1;
	for (ElfW(Half) i = 0; i < o->phnum; i++) {
		const ElfW(Phdr) *p = &o->phdr[i];
		uintptr_t lo = (uintptr_t)o->base + p->p_vaddr;
		if (p->p_type == PT_GNU_RELRO) {
			uintptr_t start = lo & ~(page - 1);
			uintptr_t end = (lo + p->p_memsz) & ~(page - 1);
			if (slot >= start && slot < end)
				return PROT_READ;
		} else if (p->p_type == PT_LOAD && slot >= lo && slot < lo + p->p_memsz) {
			prot = ((p->p_flags & PF_R) ? PROT_READ : 0) |
			       ((p->p_flags & PF_W) ? PROT_WRITE : 0) |
			       ((p->p_flags & PF_X) ? PROT_EXEC : 0);
		}
	}
	return prot;
}

/* Is `addr` inside the object's own mappings (an unbound slot's PLT)? */
static int inside(const struct object *o, uintptr_t addr)
{
	for (ElfW(Half) i = 0; i < o->phnum; i++) {
		const ElfW(Phdr) *p = &o->phdr[i];
		uintptr_t lo = (uintptr_t)o->base + p->p_vaddr;
		if (p->p_type == PT_LOAD && addr >= lo && addr < lo + p->p_memsz)
			return 1;
	}
	return 0;
}

static int write_slot(const struct object *o, const char *symbol, uintptr_t slot, void *value)
{
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	int prot = slot_prot(o, slot, page);
	if (prot < 0)
		return hpct__fail(-ENOEXEC, HPCT_SUB_INIT,
		                  "%s: GOT slot of %s at offset 0x%lx lies in no loaded segment",
		                  o->path, symbol, (unsigned long)(slot - o->base));
	void *start = (void *)(slot & ~(page - 1));
	if (!(prot & PROT_WRITE) && mprotect(start, page, prot | PROT_WRITE) != 0) {
		int err = errno;
		return hpct__fail(-err, HPCT_SUB_INIT,
		                  "%s: cannot make the GOT slot of %s writable (mprotect: %s)",
		                  o->path, symbol, strerror(err));
	}
	__atomic_store_n((void **)slot, value, __ATOMIC_RELEASE);
	if (!(prot & PROT_WRITE) && mprotect(start, page, prot) != 0) {
		int err = errno;
		return hpct__fail(-err, HPCT_SUB_INIT,
		                  "%s: GOT slot of %s patched, but its page stays writable "
		                  "(mprotect: %s)",
		                  o->path, symbol, strerror(err));
	}
	return 0;
}

/* What a lazily bound slot would have been bound to: the object's own
 * scope's definition, the object itself excepted. */
static void *bound_later(const struct object *o, const char *symbol, void *plt)
{
	void *h = dlopen(o->path, RTLD_LAZY | RTLD_NOLOAD);
	if (!h)
		return plt;
	void *f = dlsym(h, symbol);
	dlclose(h);
	return f && !inside(o, (uintptr_t)f) ? f : plt;
}

static pthread_mutex_t patching = PTHREAD_MUTEX_INITIALIZER;

static int patch(const struct object *o, const char *symbol, void *replacement, void **previous_out)
{
	const ElfW(Dyn) *dyn = NULL;
	for (ElfW(Half) i = 0; i < o->phnum; i++)
		if (o->phdr[i].p_type == PT_DYNAMIC)
			dyn = (const ElfW(Dyn) *)((uintptr_t)o->base + o->phdr[i].p_vaddr);
	const ElfW(Sym) *symtab = NULL;
	const char *strtab = NULL;
	uintptr_t rel[2] = { 0, 0 }; /* DT_JMPREL, DT_RELA */
	size_t rel_size[2] = { 0, 0 };
	ElfW(Sxword) pltrel = DT_RELA;
	for (; dyn && dyn->d_tag != DT_NULL; dyn++) {
		switch (dyn->d_tag) {
		case DT_SYMTAB:
			symtab = (const ElfW(Sym) *)at(o, dyn->d_un.d_ptr);
			break;
		case DT_STRTAB:
			strtab = (const char *)at(o, dyn->d_un.d_ptr);
			break;
		case DT_JMPREL:
			rel[0] = at(o, dyn->d_un.d_ptr);
			break;
		case DT_PLTRELSZ:
			rel_size[0] = dyn->d_un.d_val;
			break;
		case DT_RELA:
			rel[1] = at(o, dyn->d_un.d_ptr);
			break;
		case DT_RELASZ:
			rel_size[1] = dyn->d_un.d_val;
			break;
		case DT_PLTREL:
			pltrel = (ElfW(Sxword))dyn->d_un.d_val;
			break;
		}
	}
	if (!symtab || !strtab || (rel[0] && pltrel != DT_RELA))
		return hpct__fail(-ENOEXEC, HPCT_SUB_INIT,
		                  "%s: no %s in its dynamic section: cannot patch %s", o->path,
		                  !symtab   ? "symbol table"
		                  : !strtab ? "string table"
		                            : "RELA relocations for the PLT",
		                  symbol);
	int patched = 0;
	for (int t = 0; t < 2; t++) {
		const ElfW(Rela) *r = (const ElfW(Rela) *)rel[t];
		size_t n = r ? rel_size[t] / sizeof(*r) : 0;
		for (size_t i = 0; i < n; i++) {
			unsigned long type = ELF64_R_TYPE(r[i].r_info);
			unsigned long sym = ELF64_R_SYM(r[i].r_info);
			if ((type != SLOT_JUMP && type != SLOT_DATA) || sym == 0 ||
			    strcmp(strtab + symtab[sym].st_name, symbol) != 0)
				continue;
			uintptr_t slot = (uintptr_t)o->base + r[i].r_offset;
			void *old = __atomic_load_n((void **)slot, __ATOMIC_ACQUIRE);
			if (patched == 0 && previous_out)
				*previous_out = inside(o, (uintptr_t)old)
				                        ? bound_later(o, symbol, old)
				                        : old;
			int rc = write_slot(o, symbol, slot, replacement);
			if (rc)
				return rc;
			patched++;
		}
	}
	HPCT_INFO(HPCT_SUB_INIT, "%s: %d GOT slot(s) of %s now point at %p", o->path, patched,
	          symbol, replacement);
	return patched;
}

/* dl_iterate_phdr's callback of hpct__object_named: the object whose
 * PT_LOAD segments hold the address. */
struct holder {
	uintptr_t addr;
	const char *const *prefixes;
	int named;
};

static int holds(struct dl_phdr_info *info, size_t size, void *arg)
{
	(void)size;
	struct holder *h = arg;
	struct object o = { .base = info->dlpi_addr,
		            .phdr = info->dlpi_phdr,
		            .phnum = info->dlpi_phnum };
	if (!inside(&o, h->addr))
		return 0;
	for (const char *const *p = h->prefixes; *p; p++)
		h->named |= named(info->dlpi_name, *p);
	return 1;
}

int hpct__object_named(const void *addr, const char *const *prefixes)
{
	struct holder h = { .addr = (uintptr_t)addr, .prefixes = prefixes };
	if (addr && prefixes)
		dl_iterate_phdr(holds, &h);
	return h.named;
}

int hpct__got_patch(const char *object_basename_prefix, const char *symbol, void *replacement,
                    void **previous_out)
{
	if (!object_basename_prefix || !*object_basename_prefix || !symbol || !*symbol ||
	    !replacement)
		return hpct__fail(HPCT_EINVAL, HPCT_SUB_INIT,
		                  "GOT patch of %s in %s*: no object, symbol or replacement given",
		                  symbol ? symbol : "(no symbol)",
		                  object_basename_prefix ? object_basename_prefix : "(no object)");
	struct object o = { .prefix = object_basename_prefix };
	dl_iterate_phdr(match, &o);
	if (!o.found)
		return hpct__fail(-ENOENT, HPCT_SUB_INIT,
		                  "no loaded object named %s*: its GOT slot of %s not patched",
		                  object_basename_prefix, symbol);
	pthread_mutex_lock(&patching);
	int rc = patch(&o, symbol, replacement, previous_out);
	pthread_mutex_unlock(&patching);
	return rc;
}
