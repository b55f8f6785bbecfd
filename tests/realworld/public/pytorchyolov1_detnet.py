"""YOLO v1 with a ResNet-50 + DetNet-layer backbone as trained by the repository's ``train.py``: ``resnet50()`` of
``resnet_yolo.py`` (ResNet-50 up to ``layer4``, then three dilated DetNet bottlenecks, a 3x3 conv to 30 channels, BN
and a sigmoid, permuted to a ``[B, S, S, 30]`` grid: two boxes ``(x, y, w, h, c)`` and 20 class scores per cell),
``yoloLoss(7, 2, 5, 0.5)`` (its ``S`` unread; the responsible box chosen per cell by IoU, its confidence regressed
to the IoU, sqrt of w/h, no-object confidences weighted 0.5, class MSE, all summed and divided by the batch size), SGD
(momentum 0.9, weight decay 5e-4, one param group per tensor) at lr 1e-3 stepped down at epochs 30 and 40, and
``yoloDataset``'s ``encoder`` turning boxes into the 14x14x30 target.

Source: https://github.com/abeardear/pytorch-YOLO-v1
Commit: 823c45185a4af4f895d53ca466f725a1edbcfec0
Files: train.py, resnet_yolo.py (``Bottleneck``, ``detnet_bottleneck``, ``ResNet``, ``resnet50``), yoloLoss.py,
dataset.py (``yoloDataset``: ``__getitem__``, ``encoder``, ``random_flip``, ``subMean``)
License: MIT (Copyright (c) 2018 xiongzihua; full text in LICENSES/abeardear-pytorch-YOLO-v1.txt)
Domain: object detection (YOLO v1 grid head on a ResNet/DetNet backbone, sum-squared multi-part loss)

Kept as written: the modules and loss listed above (the ResNet init, the DetNet layer on the 4x-expanded layer4,
``compute_iou``, the per-cell loop choosing the responsible box, the fixed not-response term), ``encoder``,
``random_flip``, the BGR->RGB + ``subMean`` + ``ToTensor`` pipeline (pixel-scale inputs minus the mean, not divided
by 255), the optimizer with one group per parameter, the lr steps at epochs 30 and 40, the loop body (forward, loss,
zero_grad, backward, step), ``net.train()`` per epoch and the validation loss in eval mode.

Deviations from the original:
- VOC is not here: synthetic 128x128 images made from ``seed``, each with 1-2 axis-aligned boxes filled with one of 20
  class colours (a seeded palette) on a noisy background, boxes and labels as the list files give them; 64 training
  and 16 test images; of the train-time augmentations only ``random_flip`` is kept (the cv2 scale, blur, brightness,
  hue, saturation, shift and crop are left out); the images are kept RGB (the BGR->RGB swap is the identity);
- sizes for 2 CPU cores: ``image_size`` 448 -> 128, so the grid is 4x4 instead of 14x14 (``grid_num = 14`` in
  ``encoder`` and the ``/14.`` of the loss become ``GRID``; ``yoloLoss(GRID, ...)`` for the unread ``7``); the
  ``cv2.resize`` to ``image_size`` is the identity (the images are made at 128x128); the ResNet-50 widths are divided
  by 16 (64..512 planes -> 4..32, the DetNet layer 2048 -> 128 in and 256 -> 16 planes), depth [3, 4, 6, 3] kept;
  ``batch_size`` 24 -> 8; ``num_workers`` 4 -> 0;
- the ImageNet ``resnet50(pretrained=True)`` weights are not loaded (no download); no GPU: the ``.cuda()`` calls, the
  ``torch.cuda.ByteTensor`` masks (CPU bool masks here), ``Variable``/``volatile`` (``no_grad`` for validation) and
  ``loss.data[0]`` (``loss.item()``) follow current torch; ``size_average=False`` -> ``reduction='sum'``;
- ``encoder``'s index pair ``int(ij[1]), int(ij[0])`` is computed once as ``r, c`` (the switch of one bug variant);
- to keep the module short, the backbone lives in ``_pytorchyolov1_resnet.py`` and the docstrings of
  ``compute_iou``, ``yoloLoss.forward`` and ``encoder`` are dropped;
- the visdom ``Visualizer``, the log file, the prints and the checkpoint saving are left out;
- the epoch loop is unrolled: one ``train_step`` is one batch (the lr set and ``net.train()`` when an epoch starts,
  the validation loss when it ends); ``eval_fn`` is the loss on a given batch in eval mode;
- the ``bug`` switches select the variants in ``BUGS``; with ``bug=None`` the copied lines run as written.
"""
# ruff: noqa: UP008, PLR0402, PLR2044, RUF059  (the original's code style is kept as written)

from __future__ import annotations

import functools
import pathlib
import random
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader

_HERE = pathlib.Path(__file__).resolve()
for _p in (str(_HERE.parents[1]), str(_HERE.parent)):
    if _p not in sys.path:
        sys.path.insert(0, _p)
from _api import Bug, Program
from _pytorchyolov1_resnet import resnet50

GRID, IMAGE_SIZE = 4, 128  # (port) 14, 448
N_TRAIN, N_TEST = 64, 16


# ---- yoloLoss.py -------------------------------------------------------------------------------------------------

class yoloLoss(nn.Module):
    def __init__(self,S,B,l_coord,l_noobj,bug=None):
        super(yoloLoss,self).__init__()
        self.S = S
        self.B = B
        self.l_coord = l_coord
        self.l_noobj = l_noobj
        self.bug = bug

    def compute_iou(self, box1, box2):
        N = box1.size(0)
        M = box2.size(0)

        lt = torch.max(
            box1[:,:2].unsqueeze(1).expand(N,M,2),  # [N,2] -> [N,1,2] -> [N,M,2]
            box2[:,:2].unsqueeze(0).expand(N,M,2),  # [M,2] -> [1,M,2] -> [N,M,2]
        )

        rb = torch.min(
            box1[:,2:].unsqueeze(1).expand(N,M,2),  # [N,2] -> [N,1,2] -> [N,M,2]
            box2[:,2:].unsqueeze(0).expand(N,M,2),  # [M,2] -> [1,M,2] -> [N,M,2]
        )

        wh = rb - lt  # [N,M,2]
        wh[wh<0] = 0  # clip at 0
        inter = wh[:,:,0] * wh[:,:,1]  # [N,M]

        area1 = (box1[:,2]-box1[:,0]) * (box1[:,3]-box1[:,1])  # [N,]
        area2 = (box2[:,2]-box2[:,0]) * (box2[:,3]-box2[:,1])  # [M,]
        area1 = area1.unsqueeze(1).expand_as(inter)  # [N,] -> [N,1] -> [N,M]
        area2 = area2.unsqueeze(0).expand_as(inter)  # [M,] -> [1,M] -> [N,M]

        iou = inter / (area1 + area2 - inter)
        return iou

    def forward(self,pred_tensor,target_tensor):
        N = pred_tensor.size()[0]
        coo_mask = target_tensor[:,:,:,4] > 0
        noo_mask = target_tensor[:,:,:,4] == 0
        coo_mask = coo_mask.unsqueeze(-1).expand_as(target_tensor)
        noo_mask = noo_mask.unsqueeze(-1).expand_as(target_tensor)

        coo_pred = pred_tensor[coo_mask].view(-1,30)
        box_pred = coo_pred[:,:10].contiguous().view(-1,5) #box[x1,y1,w1,h1,c1]
        class_pred = coo_pred[:,10:]                       #[x2,y2,w2,h2,c2]

        coo_target = target_tensor[coo_mask].view(-1,30)
        box_target = coo_target[:,:10].contiguous().view(-1,5)
        class_target = coo_target[:,10:]

        # compute not contain obj loss
        noo_pred = pred_tensor[noo_mask].view(-1,30)
        noo_target = target_tensor[noo_mask].view(-1,30)
        noo_pred_mask = torch.zeros(noo_pred.size(), dtype=torch.bool)  # (port) torch.cuda.ByteTensor, zero_()
        noo_pred_mask[:,4]=1;noo_pred_mask[:,9]=1
        noo_pred_c = noo_pred[noo_pred_mask] #noo pred只需要计算 c 的损失 size[-1,2]
        noo_target_c = noo_target[noo_pred_mask]
        nooobj_loss = F.mse_loss(noo_pred_c,noo_target_c,reduction='sum')

        #compute contain obj loss
        coo_response_mask = torch.zeros(box_target.size(), dtype=torch.bool)  # (port) as above
        coo_not_response_mask = torch.zeros(box_target.size(), dtype=torch.bool)
        box_target_iou = torch.zeros(box_target.size())
        for i in range(0,box_target.size()[0],2): #choose the best iou box
            box1 = box_pred[i:i+2]
            box1_xyxy = torch.FloatTensor(box1.size())
            box1_xyxy[:,:2] = box1[:,:2]/float(GRID) -0.5*box1[:,2:4]
            box1_xyxy[:,2:4] = box1[:,:2]/float(GRID) +0.5*box1[:,2:4]
            box2 = box_target[i].view(-1,5)
            box2_xyxy = torch.FloatTensor(box2.size())
            box2_xyxy[:,:2] = box2[:,:2]/float(GRID) -0.5*box2[:,2:4]
            box2_xyxy[:,2:4] = box2[:,:2]/float(GRID) +0.5*box2[:,2:4]
            iou = self.compute_iou(box1_xyxy[:,:4],box2_xyxy[:,:4]) #[2,1]
            max_iou,max_index = iou.max(0)
            max_index = max_index.data

            coo_response_mask[i+max_index]=1
            coo_not_response_mask[i+1-max_index]=1
            box_target_iou[i+max_index,torch.LongTensor([4])] = (max_iou).data
        #1.response loss
        box_pred_response = box_pred[coo_response_mask].view(-1,5)
        box_target_response_iou = box_target_iou[coo_response_mask].view(-1,5)
        box_target_response = box_target[coo_response_mask].view(-1,5)
        contain_loss = F.mse_loss(box_pred_response[:,4],box_target_response_iou[:,4],reduction='sum')
        loc_loss = F.mse_loss(box_pred_response[:,:2],box_target_response[:,:2],reduction='sum') + F.mse_loss(torch.sqrt(box_pred_response[:,2:4]),torch.sqrt(box_target_response[:,2:4]),reduction='sum')
        #2.not response loss
        box_pred_not_response = box_pred[coo_not_response_mask].view(-1,5)
        box_target_not_response = box_target[coo_not_response_mask].view(-1,5)
        box_target_not_response[:,4]= 0
        #I believe this bug is simply a typo
        not_contain_loss = F.mse_loss(box_pred_not_response[:,4], box_target_not_response[:,4],reduction='sum')
        if self.bug == "not_contain_loss_on_response_boxes":  # the line before commit b1272e5
            not_contain_loss = F.mse_loss(box_pred_response[:,4],box_target_response[:,4],reduction='sum')

        #3.class loss
        class_loss = F.mse_loss(class_pred,class_target,reduction='sum')

        return (self.l_coord*loc_loss + 2*contain_loss + not_contain_loss + self.l_noobj*nooobj_loss + class_loss)/N


# ---- dataset.py --------------------------------------------------------------------------------------------------

class yoloDataset(torch.utils.data.Dataset):
    image_size = IMAGE_SIZE  # (port) 448

    def __init__(self,samples,train,transform,bug=None):
        self.train = train
        self.transform=transform
        self.bug = bug
        self.mean = (123,117,104)#RGB
        self.images = [img for img, _, _ in samples]  # (port) instead of the list files and cv2.imread
        self.boxes = [torch.Tensor(box) for _, box, _ in samples]
        self.labels = [torch.LongTensor([int(c)+1 for c in label]) for _, _, label in samples]
        self.num_samples = len(self.boxes)

    def __getitem__(self,idx):
        img = self.images[idx]
        boxes = self.boxes[idx].clone()
        labels = self.labels[idx].clone()

        if self.train:
            img, boxes = self.random_flip(img, boxes)
        h,w,_ = img.shape
        boxes /= torch.Tensor([w,h,w,h]).expand_as(boxes)
        img = self.subMean(img,self.mean) #减去均值
        target = self.encoder(boxes,labels)# 7x7x30
        for t in self.transform:
            img = t(img)

        return img,target

    def __len__(self):
        return self.num_samples

    def encoder(self,boxes,labels):
        grid_num = GRID  # (port) 14
        target = torch.zeros((grid_num,grid_num,30))
        cell_size = 1./grid_num
        wh = boxes[:,2:]-boxes[:,:2]
        cxcy = (boxes[:,2:]+boxes[:,:2])/2
        for i in range(cxcy.size()[0]):
            cxcy_sample = cxcy[i]
            ij = (cxcy_sample/cell_size).ceil()-1 #
            r, c = (int(ij[0]), int(ij[1])) if self.bug == "grid_row_col_swapped" else (int(ij[1]), int(ij[0]))
            target[r,c,4] = 1
            target[r,c,9] = 1
            target[r,c,int(labels[i])+9] = 1
            xy = ij*cell_size #匹配到的网格的左上角相对坐标
            delta_xy = (cxcy_sample -xy)/cell_size
            target[r,c,2:4] = wh[i]
            target[r,c,:2] = delta_xy
            target[r,c,7:9] = wh[i]
            target[r,c,5:7] = delta_xy
        return target

    def subMean(self,bgr,mean):
        mean = np.array(mean, dtype=np.float32)
        bgr = bgr - mean
        return bgr

    def random_flip(self, im, boxes):
        if random.random() < 0.5:
            im_lr = np.fliplr(im).copy()
            h,w,_ = im.shape
            xmin = w - boxes[:,2]
            xmax = w - boxes[:,0]
            boxes[:,0] = xmin
            boxes[:,2] = xmax
            return im_lr, boxes
        return im, boxes


def _to_tensor(img):
    """(port) ``transforms.ToTensor()`` on a float HWC array: a CHW tensor, not rescaled."""
    return torch.from_numpy(np.ascontiguousarray(img.transpose(2, 0, 1))).float()


def _synthetic(seed, n):
    """(port) 1-2 boxes per image, each filled with its class colour (20 seeded colours), on a noisy background."""
    rng = np.random.RandomState(seed)
    palette = np.random.RandomState(12345).randint(0, 256, (20, 3))
    samples = []
    for _ in range(n):
        img = rng.randint(0, 60, (IMAGE_SIZE, IMAGE_SIZE, 3)).astype(np.float32)
        boxes, labels = [], []
        for _ in range(rng.randint(1, 3)):
            bw, bh = rng.randint(24, 64, 2)
            x1, y1 = rng.randint(0, IMAGE_SIZE - bw), rng.randint(0, IMAGE_SIZE - bh)
            c = rng.randint(20)
            img[y1:y1 + bh, x1:x1 + bw] = palette[c] + rng.randint(-20, 20, (bh, bw, 3))
            boxes.append([x1, y1, x1 + bw, y1 + bh])
            labels.append(c)
        samples.append((img.clip(0, 255), boxes, labels))
    return samples


# ---- train.py ----------------------------------------------------------------------------------------------------

def _build(seed, bug=None):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    learning_rate = 0.001
    num_epochs = 50
    batch_size = 8  # (port) 24
    net = resnet50()
    criterion = yoloLoss(GRID,2,5,0.5,bug=bug)  # (port) yoloLoss(7,2,5,0.5): S is not read by the loss
    net.train()
    # different learning rate
    params=[]
    params_dict = dict(net.named_parameters())
    for key,value in params_dict.items():
        if key.startswith('features'):
            params += [{'params':[value],'lr':learning_rate*1}]
        else:
            params += [{'params':[value],'lr':learning_rate}]
    optimizer = torch.optim.SGD(params, lr=learning_rate, momentum=0.9, weight_decay=5e-4)

    train_dataset = yoloDataset(_synthetic(seed, N_TRAIN),train=True,transform = [_to_tensor],bug=bug)
    train_loader = DataLoader(train_dataset,batch_size=batch_size,shuffle=True,num_workers=0)
    test_dataset = yoloDataset(_synthetic(seed + 1000, N_TEST),train=False,transform = [_to_tensor],bug=bug)
    test_loader = DataLoader(test_dataset,batch_size=batch_size,shuffle=False,num_workers=0)
    st = {"epoch": 0, "it": None, "lr": learning_rate, "validation_loss": None}

    def train_step():
        if st["it"] is None:  # an epoch starts
            epoch = st["epoch"]
            net.train()
            if epoch == 30:
                st["lr"]=0.0001
            if epoch == 40:
                st["lr"]=0.00001
            for param_group in optimizer.param_groups:
                param_group['lr'] = st["lr"]
            st["it"], st["i"] = iter(train_loader), 0
        images,target = next(st["it"])
        pred = net(images)
        loss = criterion(pred,target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        st["i"] += 1
        if st["i"] == len(train_loader):  # the epoch ends: validation
            st["validation_loss"] = validate()
            st["epoch"], st["it"] = min(st["epoch"] + 1, num_epochs - 1), None
        return loss.item()

    def validate():
        validation_loss = 0.0
        net.eval()
        with torch.no_grad():  # (port) Variable(..., volatile=True)
            for i,(images,target) in enumerate(test_loader):
                pred = net(images)
                loss = criterion(pred,target)
                validation_loss += loss.item()
        validation_loss /= len(test_loader)
        return validation_loss

    def eval_fn(model, batch):
        was = model.training
        model.eval()
        with torch.no_grad():
            loss = float(criterion(model(batch[0]), batch[1]))
        model.train(was)
        return loss

    batch = next(iter(test_loader))
    return Program(name="pytorchyolov1_detnet", model=net, batch=batch, loss_fn=criterion, optimizer=optimizer,
                   train_step=train_step, eval_fn=eval_fn, loader=train_loader)


build = functools.partial(_build, bug=None)

BUGS = [
    # the repository's own loss before commit b1272e5 ("Bug fix in yoloLoss.py",
    # https://github.com/abeardear/pytorch-YOLO-v1/commit/b1272e52aabcbf48bbb229e6f67e76a35905bbaf): the
    # not-response term computed on the responsible boxes against their 1-confidence targets, so the second box of
    # each object cell is never pushed to 0 and the responsible box gets a second, conflicting confidence target.
    Bug("not_contain_loss_on_response_boxes", functools.partial(_build, bug="not_contain_loss_on_response_boxes"),
        "learning_ledger", ("OBJECTIVE",)),
    # classic grid-indexing slip in encoder: the target written at [column, row] instead of [row, column], so the
    # object's cell (and its offsets) no longer match where the object is in the image.
    Bug("grid_row_col_swapped", functools.partial(_build, bug="grid_row_col_swapped"), "learning_ledger",
        ("TASK",)),
]
