"""Hardware model: :class:`Topology` of GPUs, hosts and links, YAML descriptions and presets.

Load a server with :func:`load_hardware` (a preset name, a YAML path or an inline mapping),
list the presets with :func:`list_presets`, show one with :func:`describe_topology`, store
the resolved one with :func:`topology_to_dict`.
"""

from sim.hardware.build import topology_from_spec
from sim.hardware.describe import describe_topology, topology_to_dict
from sim.hardware.loader import list_presets, load_hardware, load_hardware_spec
from sim.hardware.parts import GPU, Host, Link
from sim.hardware.spec import HardwareSpec
from sim.hardware.topology import Topology

__all__ = [
    "GPU",
    "HardwareSpec",
    "Host",
    "Link",
    "Topology",
    "describe_topology",
    "list_presets",
    "load_hardware",
    "load_hardware_spec",
    "topology_from_spec",
    "topology_to_dict",
]
