/* The function libgot_caller_*.so import. */
int got_callee(int x);

__attribute__((visibility("default"))) int got_callee(int x)
{
	return x + 1;
}
