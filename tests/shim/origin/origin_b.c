/* liborigin_b.so, found beside liborigin_a.so. */
int origin_b(void);

__attribute__((visibility("default"))) int origin_b(void)
{
	return 42;
}
