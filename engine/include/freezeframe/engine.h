#pragma once
// What a server embedding the engine includes: the spec (load_spec) and the Engine with its
// step API. The rooms' own headers (freezeframe/engine/{spec,plan,model,runtime}/) hold the rest.

#include "freezeframe/engine/runtime/engine.h"
#include "freezeframe/engine/spec/spec.h"
