"""The FGD paper's static GPU packing experiment on the openb trace (``gpuq pack``)."""
