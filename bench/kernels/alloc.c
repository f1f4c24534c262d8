/* alloc MB: touch MB mebibytes of fresh memory page by page, then exit; its peak RSS is
 * that much above the C runtime's (bench/bisect_power.py --memory). */
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    size_t bytes = (size_t)((argc > 1 ? atof(argv[1]) : 1.0) * 1048576);
    char *p = malloc(bytes);
    if (!p)
        return 1;
    memset(p, 1, bytes);
    return p[bytes / 2] != 1;
}
