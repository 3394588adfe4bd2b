#include "../common/mphalcommon.h"
