#include "mphalcommon.h"
