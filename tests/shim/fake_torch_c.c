/* A stand-in for torch's _C module: tests/test_torch_fake.c copies it to
 * <dir>/torch/_C.cpython-311-x86_64-linux-gnu.so beside a version.py of its
 * own, where libhpct_preload.so looks for the torch version.  Its code is
 * never called: being loaded from there is all it does. */
int fake_torch_c(void);

__attribute__((visibility("default"))) int fake_torch_c(void)
{
	return 0;
}
