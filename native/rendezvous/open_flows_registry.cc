// The transport's registry of open flows (open_flows.h), marked from the settings' class marks. Apart
// from open_flows.cc so that the C++ unit tests build the registry without the settings (TF's absl).
#include "open_flows.h"
#include "transport.h"  // DscpForClass, PriorityForClass

namespace geryon {

OpenFlows& OpenFlowRegistry() {
  static OpenFlows* const registry =
      new OpenFlows([](int cls) { return ClassMarks{DscpForClass(cls), PriorityForClass(cls)}; });
  return *registry;
}

}  // namespace geryon
