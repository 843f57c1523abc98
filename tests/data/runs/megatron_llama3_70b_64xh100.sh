# A Megatron-LM launch of Llama-3-70B on 8 nodes of 8 H100, in the argument names of
# NVIDIA/Megatron-LM@d98e8a64dd megatron/training/arguments.py (written for pipesim's tests;
# the model sizes are Llama-3-70B's config.json: 80 layers, hidden 8192, FFN 28672, 64 heads,
# 8 KV heads, vocabulary 128256).
CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nproc_per_node 8 --nnodes 8 --node_rank 0 \
    --master_addr node0 --master_port 6000 \
    pretrain_gpt.py \
    --num-layers 80 --hidden-size 8192 --ffn-hidden-size 28672 \
    --num-attention-heads 64 --group-query-attention --num-query-groups 8 \
    --seq-length 8192 --max-position-embeddings 8192 \
    --position-embedding-type rope --rotary-base 500000 --normalization RMSNorm --swiglu \
    --untie-embeddings-and-output-weights --disable-bias-linear \
    --tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Meta-Llama-3-70B \
    --vocab-size 128256 \
    --tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 \
    --num-layers-per-virtual-pipeline-stage 5 --sequence-parallel \
    --micro-batch-size 1 --global-batch-size 128 \
    --bf16 --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather \
    --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 \
    --lr 1.5e-4 --min-lr 1.5e-5 --lr-decay-style cosine --lr-warmup-iters 200 \
    --weight-decay 0.1 --clip-grad 1.0 --adam-beta1 0.9 --adam-beta2 0.95 \
    --train-iters 100 --log-interval 1 --log-throughput --eval-iters 0 \
    --data-path /data/llama3/tokens_text_document --split 99,1,0 \
    --save /ckpt/llama3-70b --save-interval 1000 --ckpt-format torch_dist
