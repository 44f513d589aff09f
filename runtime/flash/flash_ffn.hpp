// A model's FFN layers served from a neuron file under a DRAM budget (LLM in a flash).
#pragma once
