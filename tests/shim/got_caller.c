/* Imports got_callee from libgot_callee.so and calls it through the PLT:
 * a JUMP_SLOT relocation. */
int got_callee(int x);
int got_caller_call(int x);

__attribute__((visibility("default"))) int got_caller_call(int x)
{
	return got_callee(x);
}
