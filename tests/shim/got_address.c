/* Imports got_callee from libgot_callee.so and takes its address: a
 * GLOB_DAT relocation, whose GOT slot the linker then uses for the call
 * as well (.plt.got): one slot for both. */
int got_callee(int x);
int got_caller_call(int x);
void *got_caller_address(void);

__attribute__((visibility("default"))) int got_caller_call(int x)
{
	return got_callee(x);
}

__attribute__((visibility("default"))) void *got_caller_address(void)
{
	return (void *)&got_callee;
}
