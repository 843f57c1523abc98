# A DeepSpeed launch in the argument layout of deepspeedai/DeepSpeed@edaa7221
# deepspeed/launcher/runner.py (parse_args: --num_nodes, --num_gpus, --master_port), written
# for pipesim's tests: a Hugging Face causal LM trained with ZeRO-3 on 2 x 8 GPUs.
NCCL_DEBUG=WARN deepspeed --num_nodes 2 --num_gpus 8 --master_port 29500 \
    train_clm.py \
    --model_name_or_path meta-llama/Meta-Llama-3-8B \
    --block_size 4096 \
    --deepspeed_config tests/data/runs/deepspeed_zero3.json
