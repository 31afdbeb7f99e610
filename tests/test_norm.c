/* placeholder: being written */
#include "testutil.h"
int main(void) { return 77; }
